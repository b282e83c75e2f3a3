/**
 * Makes a deployment's files servable on this host: the stored bundle extracted into
 * `<dataDir>/deployments/<deployment_id>/` and built there (pre-build, dependency checks, the virtualenv
 * of its base-image digest, shell commands). The process that claims the build does it with the build
 * log in the store; every other process does the same when the deployment becomes active, so hosts
 * share nothing but the store (the virtualenv of an equal digest is reused on each host).
 */
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Kysely } from "kysely";
import type { ImageStore } from "../images/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import { type AppConfig, AppConfigError, type AppConfigOptions, parseAppConfig } from "../runtime/mod.ts";
import { type Sandbox, unjailedSandbox } from "../sandbox/mod.ts";
import type { Database } from "../store/mod.ts";
import { type BuildLogLine, type BuildResult, runBuild } from "./_build.ts";
import type { StepOptions } from "./_build_step.ts";
import { type BuildPlan, buildPlan } from "./_build_plan.ts";
import { type DependencyLayer, dependencyLayer, venvsDir } from "./_dependency_layer.ts";
import { type BundleLimits, extractBundle } from "./_bundle_extract.ts";
import { type DeploymentRow, selectBundle } from "./_records.ts";
import { type DeploymentImage, ImageStepError, pullImage } from "./_image_step.ts";
import { systemLayer, systemLayersDir } from "./_system_layer.ts";
import { DockerfileError } from "./_dockerfile.ts";
import { dockerfileImage } from "./_dockerfile_image.ts";
import { takeUnpacked } from "./_unpacked.ts";
import { type BuildVolumes, buildVolumeMounts, VolumeBuildError } from "./_build_volumes.ts";

/** How builds run on this host. */
export interface BuildSettings {
  dataDir: string;
  timeoutMs: number;
  pipIndexUrl?: string | null;
  pipFindLinks?: string | null;
  /** RUNPLANE_PIP_ALLOW_UNPINNED: `[dependencies.pip]` entries may be pip options, paths or URLs. */
  pipAllowUnpinned?: boolean;
  /** RUNPLANE_ALLOW_EXTERNAL_RUNTIMES: a deployed app may name a `[runtime.custom] url`. */
  allowExternalRuntimes?: boolean;
  bundleLimits?: Partial<BundleLimits>;
  /** Jails the build's steps; unjailed (with an environment built from scratch) without it. */
  sandbox?: Sandbox;
  /** Where bundles are kept as files (SQLite: see _bundle_files.ts); unset, in the store's rows. */
  bundleDir?: string;
  /** Images of `[build] base_image`; without it an app that names one is refused. */
  images?: ImageStore;
  /** The project volumes service: `[volumes]` must name the project's volumes; without it, none may be named. */
  volumes?: BuildVolumes;
}

/** What a deployed app's `runplane.toml` may ask for on this server. */
export function deployedAppRules(settings: BuildSettings): AppConfigOptions {
  return { allowExternalRuntimes: settings.allowExternalRuntimes, pipAllowUnpinned: settings.pipAllowUnpinned };
}

/** A deployment ready to serve on this host. */
export interface Materialised {
  dir: string;
  /** The virtualenv's interpreter, when the build made or reused one. */
  python?: string;
  baseImageDigest: string;
  venv: BuildResult["venv"];
  /** The image of `[build] base_image` it runs in; undefined: it runs on the host's system. */
  image?: DeploymentImage;
  /**
   * The `runplane.toml` read when the bundle was unpacked, before any of the tenant's commands ran: the
   * server reads the app's settings from here, never from the folder, which the project's commands wrote.
   */
  configToml: string;
}

/** A build that cannot succeed; its message is the deployment's error. */
export class DeploymentBuildError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "DeploymentBuildError";
  }
}

/** The folder a deployment is built in on this host. */
export function deploymentDir(dataDir: string, deploymentId: string): string {
  return join(dataDir, "deployments", deploymentId);
}

/**
 * The file that says a deployment is built (written last): beside its folder, not in it, where only the
 * server writes (the folder is the project's once its commands ran).
 */
function builtMarker(dataDir: string, deploymentId: string): string {
  return join(dataDir, "deployments", `${deploymentId}.built.json`);
}

/** The deployment fields that name where it is built and whose its virtualenv is. */
export type DeploymentPlace = Pick<DeploymentRow, "deployment_id" | "project_id" | "bundle_digest">;

/** The dependency layer of `deployment`'s `plan` on this host. */
function layerOf(
  deployment: DeploymentPlace,
  options: { plan: BuildPlan; config: AppConfig; dataDir: string; imageDigest?: string },
): DependencyLayer {
  return dependencyLayer(options.plan, {
    venvsDir: venvsDir(options.dataDir),
    python: options.config.python,
    deploymentDir: deploymentDir(options.dataDir, deployment.deployment_id),
    projectId: deployment.project_id,
    bundleDigest: deployment.bundle_digest,
    imageDigest: options.imageDigest,
  });
}

/**
 * The image `config` runs in, pulled and unpacked on this host; undefined without `[build] base_image`.
 * `recorded` is the digest the deployment's build pulled, when another host built it: this host serves the
 * same image or refuses (its tag was pushed again since).
 */
async function imageOf(
  config: AppConfig,
  options: BuildSettings & { log(line: BuildLogLine): void; recorded: string | null },
): Promise<DeploymentImage | undefined> {
  const reference = config.build.baseImage;
  if (reference === undefined) return undefined;
  const images = options.images;
  if (!images) {
    throw new DeploymentBuildError("This server runs apps on its own system only: deploy without [build] base_image");
  }
  try {
    return await pullImage(reference, { images, log: options.log, expected: options.recorded ?? undefined });
  } catch (error) {
    if (error instanceof ImageStepError) throw new DeploymentBuildError(error.message);
    throw error;
  }
}

/** What every step of `deployment`'s build runs with: its timeout, log, jail and network. */
function stepOptions(
  deployment: Pick<DeploymentRow, "project_id">,
  options: {
    config: AppConfig;
    settings: BuildSettings & { log(line: BuildLogLine): void; signal?: AbortSignal };
  },
): Omit<StepOptions, "image"> {
  const { settings } = options;
  return {
    timeoutMs: settings.timeoutMs,
    log: settings.log,
    signal: settings.signal,
    sandbox: settings.sandbox ?? unjailedSandbox(),
    projectId: deployment.project_id,
    egress: options.config.egress,
  };
}

/** The image built from the app's Dockerfile (`_dockerfile_image.ts`); its errors are the build's. */
async function dockerfileImageOf(
  config: AppConfig,
  options: BuildSettings & {
    log(line: BuildLogLine): void;
    signal?: AbortSignal;
    deployment: DeploymentRow;
    dir: string;
  },
): Promise<DeploymentImage> {
  const { deployment, images } = options;
  if (!images) {
    throw new DeploymentBuildError("This server runs apps on its own system only: deploy without a Dockerfile");
  }
  try {
    return await dockerfileImage(config, {
      images,
      dir: options.dir,
      bundleDigest: deployment.bundle_digest,
      layersDir: systemLayersDir(options.dataDir),
      recorded: deployment.image_digest ?? undefined,
      ...stepOptions(deployment, { config, settings: options }),
    });
  } catch (error) {
    if (error instanceof ImageStepError || error instanceof DockerfileError) {
      throw new DeploymentBuildError(error.message);
    }
    throw error;
  }
}

function readConfig(configToml: string, dir: string, settings: BuildSettings): AppConfig {
  try {
    return parseAppConfig(configToml, dir, deployedAppRules(settings));
  } catch (error) {
    throw new DeploymentBuildError(`runplane.toml: ${error instanceof AppConfigError ? error.message : error}`);
  }
}

/**
 * Where `deployment` is (or will be) served from on this host, read from the `runplane.toml` its build
 * recorded, without building it: its folder and its virtualenv's interpreter (undefined when it has no
 * pip dependencies), and whether it runs in an image (whose root is known only once pulled).
 * `materialise` makes the same paths. Throws `DeploymentBuildError` when the file does not parse here.
 */
export function plannedPaths(
  deployment: DeploymentPlace,
  options: { configToml: string; settings: BuildSettings },
): { dir: string; python?: string; image: boolean } {
  const dir = deploymentDir(options.settings.dataDir, deployment.deployment_id);
  const config = readConfig(options.configToml, dir, options.settings);
  const plan = buildPlan(config);
  const image = config.build.baseImage !== undefined
    || (config.custom?.kind === "process" && !!config.custom.dockerfile);
  if (plan.pipRequirements.length === 0) return { dir, image };
  return { dir, image, python: layerOf(deployment, { plan, config, dataDir: options.settings.dataDir }).python };
}

/** Puts the deployment's files in `dir`: the upload's own unpacking when this host kept it, else the store's bundle. */
async function unpack(
  db: Kysely<Database>,
  deployment: DeploymentRow,
  options: { dir: string; settings: BuildSettings; log(line: BuildLogLine): void },
): Promise<void> {
  const digest = deployment.bundle_digest;
  if (await takeUnpacked(options.settings.dataDir, { digest, dir: options.dir })) {
    options.log({ stream: "build", text: `==> bundle ${digest}: unpacked here when it was uploaded` });
    return;
  }
  const bundle = await selectBundle(db, digest, { bundleDir: options.settings.bundleDir });
  if (!bundle) throw new DeploymentBuildError(`The bundle ${digest} is missing from the store`);
  const extracted = await extractBundle(bundle.chunks, options.dir, options.settings.bundleLimits);
  options.log({ stream: "build", text: `==> bundle ${digest}: ${extracted.files} files` });
}

/**
 * Extracts and builds `deployment` (or finds it built already: a marker file is written last); `log`
 * gets every line of output. Throws `DeploymentBuildError` when the build fails.
 */
export async function materialise(
  db: Kysely<Database>,
  deployment: DeploymentRow,
  options: BuildSettings & {
    log(line: BuildLogLine): void;
    /** Told the build's plan once `runplane.toml` was read: the base-image digest and the file's text. */
    onPlan?(plan: { digest: string; configToml: string }): Promise<void>;
    /** Told the image it runs in once pulled (apps with `[build] base_image`), before its steps run. */
    onImage?(image: DeploymentImage): Promise<void>;
    /** Stops the build (its step's process group is killed). */
    signal?: AbortSignal;
  },
): Promise<Materialised> {
  const dir = deploymentDir(options.dataDir, deployment.deployment_id);
  const marker = builtMarker(options.dataDir, deployment.deployment_id);
  const built = await readFile(marker, "utf8").then((text) => JSON.parse(text) as Materialised, () => null);
  if (built) return built;
  // A folder without the marker is a build that did not finish (the process stopped): start over. rm
  // removes a link the project's commands left, never what it names; none of them runs any more.
  await rm(dir, { recursive: true, force: true });
  try {
    await unpack(db, deployment, { dir, settings: options, log: options.log });
    const configToml = await readFile(join(dir, "runplane.toml"), "utf8").catch(() => undefined);
    if (configToml === undefined) throw new DeploymentBuildError("runplane.toml: it cannot be read");
    const config = readConfig(configToml, dir, options);
    const plan = buildPlan(config);
    const volumeMounts = await buildVolumeMounts(config, {
      projectId: deployment.project_id,
      volumes: options.volumes,
    });
    await options.onPlan?.({ digest: plan.digest, configToml });
    const image = config.custom?.kind === "process" && config.custom.dockerfile
      ? await dockerfileImageOf(config, { ...options, deployment, dir })
      : await imageOf(config, { ...options, recorded: deployment.image_digest });
    if (image) await options.onImage?.(image);
    const system = image
      ? systemLayer(image.digest, { apt: plan.apt, conda: plan.conda, layersDir: systemLayersDir(options.dataDir) })
      : undefined;
    // A virtualenv is made with the interpreter of the root it runs in: the system layer's, or the image's.
    const imageDigest = system ? `sha256:${system.key}` : image?.digest;
    const result = await runBuild(dir, plan, {
      layer: layerOf(deployment, { plan, config, dataDir: options.dataDir, imageDigest }),
      image,
      systemLayer: system,
      images: options.images,
      python: config.python,
      pipIndexUrl: options.pipIndexUrl ?? undefined,
      pipFindLinks: options.pipFindLinks ?? undefined,
      pipAllowUnpinned: options.pipAllowUnpinned,
      volumeMounts,
      ...stepOptions(deployment, { config, settings: options }),
    });
    const done: Materialised = {
      dir,
      python: result.venv === "none" ? undefined : result.python,
      baseImageDigest: plan.digest,
      venv: result.venv,
      configToml,
      ...(image ? { image: { ...image, root: result.imageRoot ?? image.root } } : {}),
    };
    await writeFile(marker, JSON.stringify(done));
    return done;
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    if (error instanceof DeploymentBuildError) throw error;
    if (error instanceof ProblemError) throw new DeploymentBuildError(error.message, { cause: error });
    if (error instanceof Error && (error.name === "BuildError" || error instanceof VolumeBuildError)) {
      throw new DeploymentBuildError(error.message);
    }
    throw error;
  }
}
