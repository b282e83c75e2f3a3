/**
 * The system layer of an app with `[build] base_image`: its `[dependencies.apt]` installed by the image's
 * own apt, then its `[dependencies.conda]` by the image's own micromamba, mamba or conda, into a copy of the
 * image's root, in the jail (uid 0 of a user namespace of its own, with the build's egress). A layer is
 * named by the digest of its inputs — the image digest and the package lists — and shared by every
 * deployment, of any project, with the same: its step sees no bundle (not mounted, the
 * working directory `/`), runs with an environment built from scratch as a uid of the layer's own, and
 * the layer is read-only to everyone once ready (docs/security.md, "What builds may share").
 *
 * Layout: `<data>/image-layers/<hex>/` (the root file system), `<hex>.ready` beside it, written last by
 * the server, naming the root to use; a folder without it is an unfinished build, made again.
 *
 * In a cluster with a shared registry (`RUNPLANE_REGISTRY`) the host that builds a layer pushes it there as
 * `system-layers:<hex>`; another host pulls and unpacks it (its root is then in the image store) instead of
 * running apt. A registry that cannot give it only means this host builds it.
 */
import { createHash } from "node:crypto";
import { lstat, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { isAbsolute, join } from "node:path";
import { type ImageStore, touchUsed, treeBytes } from "../images/mod.ts";
import { copyImageRoot, layerBuilder } from "../sandbox/mod.ts";
import { runStep, type StepOptions, withLock } from "./_build_step.ts";

/** Where one system layer is and who builds it. */
export interface SystemLayer {
  /** The hex digest of its inputs. */
  key: string;
  /** Its root file system, once ready. */
  dir: string;
  /** The `layerBuilder` its step runs as. */
  builder: string;
  /** apt's `name` or `name=version` entries, sorted. */
  apt: string[];
  /** conda's `name` or `name=version` entries, sorted. */
  conda: string[];
  /** What the build log calls it: `apt`, `conda` or `apt+conda`. */
  label: string;
}

/** The folder of this host's system layers. */
export function systemLayersDir(dataDir: string): string {
  return join(dataDir, "image-layers");
}

/** The system layer of the `apt` and `conda` packages on the image `digest`; undefined when there are none. */
export function systemLayer(
  digest: string,
  options: { apt: readonly string[]; conda: readonly string[]; layersDir: string },
): SystemLayer | undefined {
  // A package manager installs a set: the order the entries were written in does not name another layer.
  const apt = [...new Set(options.apt)].sort();
  const conda = [...new Set(options.conda)].sort();
  if (apt.length + conda.length === 0) return undefined;
  const inputs = ["apt", digest, ...apt, ...(conda.length ? ["conda", ...conda] : [])];
  const key = createHash("sha256").update(inputs.join("\0")).digest("hex");
  const label = [apt.length ? "apt" : "", conda.length ? "conda" : ""].filter(Boolean).join("+");
  return { key, dir: join(options.layersDir, key), builder: layerBuilder(`sha256:${key}`), apt, conda, label };
}

/** The repository of system layers in the cluster's registry. */
const SHARED_NAME = "system-layers";

/** The root of `layer` when it is ready on this host (its marker names it); null otherwise. */
async function readyRoot(layer: SystemLayer): Promise<string | null> {
  const marker = `${layer.dir}.ready`;
  if (!(await lstat(marker).then((stat) => stat.isFile(), () => false))) return null;
  const root = (await readFile(marker, "utf8")).split("\n")[1]?.trim() ?? "";
  // A marker of an earlier version names no root: the layer's own folder. A root that is gone (evicted
  // from the image cache) is not ready.
  const named = isAbsolute(root) ? root : layer.dir;
  return (await lstat(named).then((stat) => stat.isDirectory(), () => false)) ? named : null;
}

/** Whether `layer` is ready on this host (built, or pulled from the cluster's registry). */
export async function systemLayerReady(layer: SystemLayer): Promise<boolean> {
  return (await readyRoot(layer)) !== null;
}

/** Marks `layer` ready at `root`; the marker is the server's, in a folder only the server writes. */
async function markReady(layer: SystemLayer, root: string): Promise<void> {
  await writeFile(`${layer.dir}.ready`, `sha256:${layer.key}\n${root}\n`, { flag: "wx", mode: 0o644 });
}

/** The layer from the cluster's registry, unpacked here; null when there is none to pull. */
async function pulledLayer(layer: SystemLayer, images: ImageStore | undefined): Promise<string | null> {
  if (!images?.sharedRegistry) return null;
  const root = await images.pullShared({ name: SHARED_NAME, tag: layer.key });
  if (root) await markReady(layer, root);
  return root;
}

/** Pushes the layer this host built to the cluster's registry; a failure is logged, the build goes on. */
async function pushLayer(layer: SystemLayer, options: StepOptions & { images?: ImageStore }): Promise<void> {
  const { images } = options;
  if (!images?.sharedRegistry) return;
  const started = performance.now();
  try {
    await images.pushShared(layer.dir, { name: SHARED_NAME, tag: layer.key });
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    options.log({ stream: "build", text: `==> ${layer.label}: pushed to ${images.sharedRegistry} (${seconds} s)` });
  } catch (error) {
    options.log({
      stream: "build",
      text: `==> ${layer.label}: not pushed to ${images.sharedRegistry} (other hosts build it themselves): ${
        (error as Error).message
      }`,
    });
  }
}

/**
 * apt in the image: `APT::Sandbox::User=root` because its own `_apt` user does not exist in a namespace of
 * one uid; the lists and the archive emptied after, so the layer holds the packages only. The package
 * names come as arguments, never as shell text.
 */
const APT_SCRIPT = [
  "set -e",
  "apt-get -q -o APT::Sandbox::User=root update",
  'apt-get -q -y -o APT::Sandbox::User=root install --no-install-recommends "$@"',
  "apt-get -q -o APT::Sandbox::User=root clean",
  "rm -rf /var/lib/apt/lists/*",
].join("\n");

/**
 * conda in the image: the first of micromamba, mamba and conda on its `PATH` installs into its base
 * environment, with the channels the image's own configuration names; an image with none says so.
 */
const CONDA_SCRIPT = [
  "set -e",
  "for tool in micromamba mamba conda; do",
  '  if command -v "$tool" >/dev/null 2>&1; then',
  '    "$tool" install -y -n base "$@"',
  '    "$tool" clean -a -y >/dev/null 2>&1 || true',
  "    exit 0",
  "  fi",
  "done",
  'echo "this image has no micromamba, mamba or conda on its PATH; [dependencies.conda] needs an image with one (mambaorg/micromamba, continuumio/miniconda3)" >&2',
  "exit 3",
].join("\n");

/** Installs the layer's packages into its copy `partial`: apt's, then conda's, each a step of the build. */
async function installPackages(
  layer: SystemLayer,
  options: StepOptions & { partial: string; env: Record<string, string> },
): Promise<void> {
  const step = { ...options, projectId: layer.builder, image: { root: options.partial, writable: true } };
  if (layer.apt.length) {
    await runStep("apt", {
      file: "/bin/sh",
      args: ["-c", APT_SCRIPT, "apt", ...layer.apt],
      shown: `apt-get install ${layer.apt.join(" ")}`,
      jail: { cwd: "/", env: { DEBIAN_FRONTEND: "noninteractive" } },
      egress: true,
    }, step);
  }
  if (layer.conda.length) {
    // The image's ENV (its PATH to conda, MAMBA_ROOT_PREFIX), as filtered for its replicas: part of the image.
    await runStep("conda", {
      file: "/bin/sh",
      args: ["-c", CONDA_SCRIPT, "conda", ...layer.conda],
      shown: `conda install ${layer.conda.join(" ")}`,
      jail: { cwd: "/", env: options.env },
      egress: true,
    }, step);
  }
}

/**
 * Makes `layer` on `base` (the image's root) unless it is ready, and answers its root and whether this
 * build made it. Throws a BuildError of the apt or conda step when it fails (its output is in the log).
 */
export async function buildSystemLayer(
  layer: SystemLayer,
  options: StepOptions & { base: string; env: Record<string, string>; images?: ImageStore },
): Promise<{ root: string; status: "new" | "cached" | "pulled" }> {
  const shown = `system layer sha256:${layer.key}`;
  const label = layer.label;
  const known = await readyRoot(layer);
  if (known) {
    await touchUsed(known); // the image cache keeps a layer used within its minimum age (_image_cache.ts)
    options.log({ stream: "build", text: `==> ${label}: cached ${shown}` });
    return { root: known, status: "cached" };
  }
  await mkdir(join(layer.dir, ".."), { recursive: true, mode: 0o700 });
  return await withLock(`${layer.dir}.lock`, options, async () => {
    const meanwhile = await readyRoot(layer);
    if (meanwhile) {
      options.log({ stream: "build", text: `==> ${label}: cached ${shown} (built meanwhile)` });
      return { root: meanwhile, status: "cached" as const };
    }
    // A marker naming a root that is gone: the lock is ours, so it is made anew.
    await rm(`${layer.dir}.ready`, { force: true });
    const pulled = await pulledLayer(layer, options.images);
    if (pulled) {
      options.log({ stream: "build", text: `==> ${label}: pulled ${shown} from ${options.images!.sharedRegistry}` });
      return { root: pulled, status: "pulled" as const };
    }
    const started = performance.now();
    options.log({ stream: "build", text: `==> ${label}: new ${shown}: ${[...layer.apt, ...layer.conda].join(" ")}` });
    // Left by a build that stopped (the lock is ours, and no process of its builder runs any more): rm
    // removes a link it meets, never what the link names.
    const partial = `${layer.dir}.partial`;
    await rm(partial, { recursive: true, force: true });
    await rm(layer.dir, { recursive: true, force: true });
    await copyImageRoot(options.base, partial, { principal: layer.builder });
    await installPackages(layer, { ...options, partial });
    await rename(partial, layer.dir);
    await markReady(layer, layer.dir);
    await touchUsed(layer.dir);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    const size = await treeBytes(layer.dir).then((bytes) => `, ${(bytes / 2 ** 20).toFixed(0)} MiB`, () => "");
    options.log({ stream: "build", text: `==> ${label}: built ${shown} (${seconds} s${size})` });
    await pushLayer(layer, options);
    return { root: layer.dir, status: "new" as const };
  }).catch(async (error) => {
    if (!(await readyRoot(layer))) await rm(`${layer.dir}.partial`, { recursive: true, force: true });
    throw error;
  });
}
