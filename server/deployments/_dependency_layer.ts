/**
 * Where a deployment's pip dependencies live, and who may share them. This is the rule of what builds may
 * share (docs/security.md, "What builds may share"):
 *
 * - A **shared** layer (a virtualenv every project with the same inputs reuses) is built only from the
 *   inputs its folder is named by: the base-image digest (the pip requirements among them) and the
 *   interpreter. Its steps never see the bundle (not mounted, not the working directory), run an isolated
 *   interpreter (`-I`: no `PYTHON*` variable, no working directory or user site on `sys.path`) with an
 *   environment built from scratch, as a uid of the layer's own that no tenant's process ever has; once
 *   ready it is only ever mounted read-only.
 * - A step that must see the bundle (a pip entry that is a path, an option or a URL, allowed by
 *   RUNPLANE_PIP_ALLOW_UNPINNED; an interpreter shipped in the bundle) makes a **project** layer: its
 *   folder is named by the project and the bundle too, and it is built as the project's uid.
 */
import { createHash } from "node:crypto";
import { lstat } from "node:fs/promises";
import { join } from "node:path";
import { layerBuilder } from "../sandbox/mod.ts";
import type { BuildPlan } from "./_build_plan.ts";

/** The interpreter a virtualenv is made with when `[deployment] python` is not set. */
export const DEFAULT_PYTHON = "python3";

/** Written last, once pip succeeded: a layer without it is an unfinished build and is made again. */
const READY = ".runplane-ready";

/** Where a deployment's virtualenv is, and how it may be built. */
export interface DependencyLayer {
  /** The virtualenv's folder. */
  dir: string;
  /** Its interpreter. */
  python: string;
  /** `shared`: reused by every project with the same inputs; `project`: this project's and bundle's alone. */
  scope: "shared" | "project";
  /** Who builds it: a `layerBuilder` for a shared layer, the project for its own. */
  builder: string;
}

/** What names a deployment's layer besides its plan. */
export interface LayerOwner {
  /** The folder of every virtualenv on this host. */
  venvsDir: string;
  /** `[deployment] python`: a bare name or an absolute path (a relative one is resolved in the bundle). */
  python: string;
  /** The deployment's folder: an interpreter inside it makes the layer the project's. */
  deploymentDir: string;
  projectId: string;
  bundleDigest: string;
  /** The image the virtualenv is made in (`[build] base_image`'s digest); undefined: the host's system. */
  imageDigest?: string;
}

function hex(...parts: string[]): string {
  return createHash("sha256").update(parts.join("\0")).digest("hex");
}

/** Where a host's builds keep their virtualenvs, one folder per dependency layer. */
export function venvsDir(dataDir: string): string {
  return join(dataDir, "venvs");
}

/** The layer of `plan`'s pip dependencies for `owner`'s deployment. */
export function dependencyLayer(plan: Pick<BuildPlan, "digest" | "pipSeesBundle">, owner: LayerOwner): DependencyLayer {
  const digest = plan.digest.replace(/^sha256:/, "");
  const seesBundle = plan.pipSeesBundle || owner.python.startsWith(`${owner.deploymentDir}/`);
  let name: string;
  // An image's interpreter is another one than the host's of the same name: its digest names the layer too.
  const python = owner.imageDigest ? `${owner.imageDigest}:${owner.python}` : owner.python;
  if (seesBundle) name = `project-${hex("project", owner.projectId, owner.bundleDigest, digest, python)}`;
  // The default interpreter's layer is named by the digest alone, as `dependencyLayerReady` looks for it.
  else name = python === DEFAULT_PYTHON ? digest : hex("shared", digest, python);
  const dir = join(owner.venvsDir, name);
  return {
    dir,
    python: join(dir, "bin", "python"),
    scope: seesBundle ? "project" : "shared",
    builder: seesBundle ? owner.projectId : layerBuilder(digest),
  };
}

/**
 * Whether the shared layer of base-image `digest` with the default interpreter is ready under `venvsDir`
 * (what the base-image endpoint's `new`/`cached` reports: a project layer is always built anew).
 */
export function sharedLayerReady(venvsDir: string, digest: string): Promise<boolean> {
  return layerReady(join(venvsDir, digest.replace(/^sha256:/, "")));
}

/** Whether the virtualenv in `dir` is ready: its marker is a plain file (never followed if a link). */
export function layerReady(dir: string): Promise<boolean> {
  return lstat(join(dir, READY)).then((stat) => stat.isFile(), () => false);
}

/** The path of `dir`'s ready marker, which the server writes once pip succeeded. */
export function readyMarker(dir: string): string {
  return join(dir, READY);
}
