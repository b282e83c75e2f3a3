/**
 * The image of an app with `[runtime.custom] dockerfile` (issue 46): its Dockerfile read from the bundle,
 * its FROM pulled through the same store and allow-list as `[build] base_image`, its steps run by
 * `_dockerfile_build.ts`, and what its replicas run — ENTRYPOINT + CMD, the first EXPOSE, WORKDIR, the ENV
 * under the rules of `[env]` — unless `[runtime.custom]` says otherwise.
 */
import { constants } from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import type { ImageConfig, ImageStore } from "../images/mod.ts";
import type { AppConfig } from "../runtime/mod.ts";
import type { BuildLogLine } from "./_build_log.ts";
import { BuildError, type StepOptions } from "./_build_step.ts";
import { commandArgv, DockerfileError, type DockerfilePlan, parseDockerfile } from "./_dockerfile.ts";
import { buildDockerfileLayer, dockerfileLayer } from "./_dockerfile_build.ts";
import { allowedEnvironment, type DeploymentImage, pullImage } from "./_image_step.ts";

/**
 * The text of the bundle's Dockerfile `name` in `dir` (a folder the server unpacked: bundles hold no links,
 * and the last component is opened with O_NOFOLLOW all the same). Throws DockerfileError when it is missing.
 */
export async function readDockerfile(dir: string, name: string): Promise<string> {
  let file;
  try {
    file = await open(join(dir, name), constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch {
    throw new DockerfileError(`runtime.custom.dockerfile ${JSON.stringify(name)} is not a file of the bundle`);
  }
  try {
    return await file.readFile("utf8");
  } finally {
    await file.close();
  }
}

/** The FROM reference of the Dockerfile `name` in `dir` (parsed and checked); throws DockerfileError. */
export async function dockerfileBase(dir: string, name: string): Promise<string> {
  return parseDockerfile(await readDockerfile(dir, name)).from.reference;
}

/** The replica's process: Docker's rules for ENTRYPOINT and CMD, the base image's where the file sets none. */
export function imageProcess(plan: DockerfilePlan, base: ImageConfig): NonNullable<DeploymentImage["process"]> {
  const entrypoint = plan.entrypoint ? commandArgv(plan.entrypoint, plan.shell) : plan.cmd ? base.entrypoint : null;
  const shellEntrypoint = plan.entrypoint !== undefined && "shell" in plan.entrypoint;
  const cmd = plan.cmd ? commandArgv(plan.cmd, plan.shell) : plan.entrypoint ? null : base.cmd;
  const exposed = base.exposedPorts.map((port) => /^(\d+)(\/tcp)?$/i.exec(port)).find((match) => match !== null);
  const port = plan.port ?? (exposed ? Number(exposed[1]) : undefined);
  return {
    // A shell-form ENTRYPOINT ignores CMD (Docker's rule).
    command: [...entrypoint ?? [], ...(shellEntrypoint ? [] : cmd ?? [])],
    ...(port !== undefined ? { port } : {}),
    workingDir: plan.workingDir ?? (base.workingDir?.startsWith("/") ? base.workingDir : "/"),
  };
}

/** What `dockerfileImage` needs besides the step options. */
export interface DockerfileImageOptions extends StepOptions {
  images: ImageStore;
  /** The unpacked bundle (before any tenant command ran in it). */
  dir: string;
  bundleDigest: string;
  layersDir: string;
  /** The FROM digest the deployment's build recorded, when another host built it. */
  recorded?: string;
}

/**
 * Builds (or finds built) the image of `config`'s Dockerfile and answers it with what its replicas run.
 * Throws DockerfileError for a file Runplane does not build, ImageStepError for a FROM that cannot be pulled
 * and BuildError for a step that failed (each message names what and where).
 */
export async function dockerfileImage(config: AppConfig, options: DockerfileImageOptions): Promise<DeploymentImage> {
  const custom = config.custom?.kind === "process" ? config.custom : undefined;
  const text = await readDockerfile(options.dir, custom!.dockerfile!);
  const from = parseDockerfile(text).from;
  const log = (line: BuildLogLine) => options.log(line);
  log({ stream: "build", text: `==> dockerfile: ${custom!.dockerfile} (FROM ${from.reference})` });
  const image = await pullImage(from.reference, { images: options.images, log, expected: options.recorded });
  const base = await options.images.config(image.digest);
  const plan = parseDockerfile(text, { base: { env: image.env, workingDir: base.workingDir } });
  const process = imageProcess(plan, base);
  if (process.command.length === 0 && !custom!.entrypoint) {
    throw new BuildError(
      "dockerfile",
      "dockerfile failed: neither the Dockerfile (nor its FROM image) has CMD or ENTRYPOINT, nor [runtime.custom] an entrypoint",
    );
  }
  const layer = dockerfileLayer(text, {
    projectId: options.projectId,
    baseDigest: image.digest,
    bundleDigest: options.bundleDigest,
    layersDir: options.layersDir,
  });
  const silent = () => undefined;
  const { root } = await buildDockerfileLayer(layer, {
    ...options,
    plan,
    base: image.root,
    baseEnv: image.env,
    context: options.dir,
    allowed: (env) => allowedEnvironment(env, silent),
  });
  return { ...image, root, env: { ...image.env, ...allowedEnvironment(plan.env, log) }, process };
}
