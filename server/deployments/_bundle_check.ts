/**
 * The checks an uploaded bundle passes before it is stored as a deployment: it unpacks safely, its
 * runplane.toml loads, and the runtime would serve it.
 */
import { mkdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { ProblemError } from "../problems/mod.ts";
import { randomBytesPooled } from "../random/mod.ts";
import { type AppConfig, AppConfigError, parseAppConfig } from "../runtime/mod.ts";
import { extractBundle } from "./_bundle_extract.ts";
import { DockerfileError } from "./_dockerfile.ts";
import { dockerfileBase } from "./_dockerfile_image.ts";
import { deployedAppRules } from "./_materialise.ts";
import type { BundleSource } from "./_records.ts";
import type { AppRef, DeploymentsOptions } from "./_types.ts";
import { keepUnpacked, sweepUnpacked, UNPACKED_KEPT_MS } from "./_unpacked.ts";

/**
 * Why the app's image cannot be deployed here (its registry, this host's tools), or undefined: the image of
 * `[build] base_image`, or the FROM of its `[runtime.custom] dockerfile` (read from the checked bundle in
 * `dir`, whose Dockerfile must parse).
 */
async function imageProblem(
  config: AppConfig,
  options: { settings: DeploymentsOptions["settings"]; dir: string },
): Promise<string | undefined> {
  const dockerfile = config.custom?.kind === "process" ? config.custom.dockerfile : undefined;
  let reference = config.build.baseImage;
  let named = `[build] base_image ${JSON.stringify(reference)}`;
  if (dockerfile !== undefined) {
    try {
      reference = await dockerfileBase(options.dir, dockerfile);
    } catch (error) {
      if (error instanceof DockerfileError) return `runtime.custom.dockerfile ${dockerfile}: ${error.message}`;
      throw error;
    }
    named = `runtime.custom.dockerfile ${dockerfile}: FROM ${JSON.stringify(reference)}`;
  }
  if (reference === undefined) return undefined;
  const problem = options.settings.images
    ? options.settings.images.admissionProblem(reference)
    : `This server runs apps on its own system only: deploy without ${
      dockerfile ? "a Dockerfile" : "[build] base_image"
    }`;
  return problem === null ? undefined : `${named}: ${problem}`;
}

/**
 * Checks the bundle unpacks safely and its runplane.toml loads, in a scratch folder, and that the
 * runtime would serve it (its replicas fit the host, its project stays within its replica limit). The
 * checked folder is kept for this host's build (see _unpacked.ts); returns what removes it.
 */
export async function checkBundle(
  ref: AppRef,
  options: Pick<DeploymentsOptions, "settings" | "runtime"> & { bundle: BundleSource },
): Promise<() => Promise<void>> {
  const { settings, bundle } = options;
  const scratch = join(settings.dataDir, "uploads", `${Date.now()}-${randomBytesPooled(6).toString("hex")}`);
  await mkdir(join(settings.dataDir, "uploads"), { recursive: true });
  await sweepUnpacked(settings.dataDir, { olderThanMs: UNPACKED_KEPT_MS, now: Date.now() });
  try {
    await extractBundle(bundle.chunks(), scratch, settings.bundleLimits);
    const text = await readFile(join(scratch, "runplane.toml"), "utf8").catch(() => {
      throw new ProblemError(
        "validation",
        "The bundle has no runplane.toml at its root; pack the app folder itself (runplane deploy does)",
        { errors: [{ path: "body", message: "has no runplane.toml at its root" }] },
      );
    });
    let problem: string | undefined;
    try {
      const config = parseAppConfig(text, scratch, deployedAppRules(settings));
      problem = await imageProblem(config, { settings, dir: scratch })
        ?? options.runtime.admissionProblem(ref.projectId, ref.appId, config);
    } catch (error) {
      if (!(error instanceof AppConfigError)) throw error;
      problem = error.message;
    }
    if (problem !== undefined) {
      throw new ProblemError("validation", `runplane.toml: ${problem}`, {
        errors: [{ path: "body.runplane.toml", message: problem }],
      });
    }
    return await keepUnpacked(settings.dataDir, { scratch, digest: bundle.digest });
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}
