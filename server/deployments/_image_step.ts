/**
 * The build's first step for an app with `[build] base_image`: the image pulled from the operator's
 * registries and its root file system unpacked (once per image digest on this host, shared read-only by
 * every deployment that uses it). Every later step and every replica runs with that root as its `/`.
 */
import { imageEnvironment, type ImageStore } from "../images/mod.ts";
import { envNameProblem, envValueProblem } from "../runtime/mod.ts";
import type { BuildLogLine } from "./_build_log.ts";

/** The image a deployment runs in. */
export interface DeploymentImage {
  /** The reference `[build] base_image` wrote. */
  reference: string;
  /** `sha256:<hex>`: the manifest digest of the image as this host's store keeps it. */
  digest: string;
  /** Its unpacked root file system on this host (read-only to every process that runs in it). */
  root: string;
  /** Its `ENV`: a replica's environment under the app's `[env]` and secrets. */
  env: Record<string, string>;
  /** What an image built from a Dockerfile runs (`_dockerfile_image.ts`): its command, port and folder. */
  process?: { command: string[]; port?: number; workingDir: string };
}

/** A failed pull or unpack; the message says which image and why. */
export class ImageStepError extends Error {
  override name = "ImageStepError";
}

/** A search path of absolute folders: the image's own `PATH` is its replicas' (its programs live there). */
const SEARCH_PATH = /^\/[^:\0]*(:\/[^:\0]*)*$/;

/**
 * The image's `ENV` a replica may get: held to the rule of `[env]` (docs/runplane-toml.md), because it too
 * passes through the processes that start the jail as root — an image's `LD_PRELOAD` would load its library
 * into them. Its `PATH` is kept when it is a list of absolute folders. Each variable left out is logged.
 */
export function allowedEnvironment(
  env: Record<string, string>,
  log: (line: BuildLogLine) => void,
): Record<string, string> {
  const allowed: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    const problem = name === "PATH"
      ? (SEARCH_PATH.test(value) ? null : "not a list of absolute folders")
      : envNameProblem(name, value) ?? envValueProblem(value);
    if (problem === null) allowed[name] = value;
    else log({ stream: "build", text: `==> image: ENV ${name} left out: ${problem}` });
  }
  return allowed;
}

function seconds(startedMs: number): string {
  return `${((performance.now() - startedMs) / 1000).toFixed(1)} s`;
}

/**
 * Pulls and unpacks `reference` into this host's store, saying each part in the build log. `expected`,
 * when given, is the digest the deployment's build recorded: another image under the same tag (it was
 * pushed again since) is refused rather than served as the same deployment.
 */
export async function pullImage(
  reference: string,
  options: { images: ImageStore; log(line: BuildLogLine): void; expected?: string },
): Promise<DeploymentImage> {
  const { images, log } = options;
  log({ stream: "build", text: `==> image: pulling ${reference}` });
  let started = performance.now();
  let digest: string;
  try {
    digest = await images.pull(reference);
  } catch (error) {
    throw new ImageStepError(`image failed: ${reference} could not be pulled: ${(error as Error).message}`);
  }
  log({ stream: "build", text: `==> image: ${reference} is ${digest} (${seconds(started)})` });
  if (options.expected !== undefined && options.expected !== digest) {
    throw new ImageStepError(
      `image failed: ${reference} is now ${digest}, not the ${options.expected} this deployment was built with; deploy again`,
    );
  }
  started = performance.now();
  try {
    const root = await images.unpack(digest);
    const { env } = await images.config(digest);
    log({ stream: "build", text: `==> image: root file system ready (${seconds(started)})` });
    return { reference, digest, root, env: allowedEnvironment(imageEnvironment(env), log) };
  } catch (error) {
    throw new ImageStepError(
      `image failed: ${reference} (${digest}) could not be unpacked: ${(error as Error).message}`,
    );
  }
}
