/**
 * What an app's replicas may see: its folder read-only, the environment its interpreter lives in, its
 * own `[env]` and its project's secrets — nothing of the server's.
 */
import { dirname, isAbsolute, relative } from "node:path";
import { type DriverFilesOptions, findDriverFiles, type Gpu, gpuDeviceNodes } from "../gpus/mod.ts";
import type { JailMount, JailSpec } from "../sandbox/mod.ts";
import { type AppConfig, volumeTargetProblem } from "./_app_config.ts";
import type { AppImage, AppSource } from "./_app_registry.ts";

/** System folders every jail already shows read-only. */
const SYSTEM = ["/usr", "/bin", "/sbin", "/lib", "/lib64"];

function inside(path: string, folder: string): boolean {
  const rel = relative(folder, path);
  return rel === "" || (!rel.startsWith("..") && !isAbsolute(rel));
}

/**
 * The folder to show for the app's interpreter: a virtualenv's root (`<venv>/bin/python` → `<venv>`).
 * A deployment's interpreter is shown only when the build made it (`venv`); an apps-dir app (the
 * operator's own files) may name any interpreter.
 */
export function interpreterHome(
  python: string,
  options: { appDir: string; source: AppSource; venv?: string },
): string | undefined {
  if (!isAbsolute(python) || inside(python, options.appDir) || SYSTEM.some((dir) => inside(python, dir))) {
    return undefined;
  }
  if (options.source === "deployment") {
    return options.venv !== undefined && inside(python, options.venv)
      ? options.venv
      : undefined;
  }
  return dirname(dirname(python));
}

/** The thread-pool variables of numerical libraries, set to the replica's cores (rounded up). */
const THREAD_VARIABLES = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"];

/** The most bytes a replica's private `/tmp` (and HOME) may hold: a quarter of its memory, at most 1 GiB. */
export function tmpBytesFor(memoryBytes: number): number {
  return Math.min(Math.floor(memoryBytes / 4), 1024 ** 3);
}

/** What the runtime needs of this host's project volumes (the volumes module's `HostVolumes`). */
export interface ReplicaVolumes {
  /** The host folder shown for `volume` of `projectId` (its `files/`). */
  source(projectId: string, volume: string): string;
  /** Makes sure the volume is here and mounted; throws an error naming it when it is not. */
  ready(projectId: string, volume: string, options?: { app?: string }): Promise<void>;
  /** Whether the volume was found missing here (and not seen since): no replica that mounts it is placed here. */
  missing(projectId: string, volume: string): boolean;
}

/** An app version as its jail is made of it. */
export interface JailedApp {
  projectId: string;
  name?: string;
  dir: string;
  source: AppSource;
  config: AppConfig;
  venv?: string;
  image?: AppImage;
  /** This host's volumes; without them an app with `[volumes]` gets none in its jail (and `prepareVolumes` refuses it). */
  volumes?: ReplicaVolumes;
}

/**
 * The app's `[volumes]` as jail mounts: each volume of the app's own project only (the name resolves within
 * it), at its path, read-only when the file says so.
 */
function volumeMounts(app: JailedApp): JailMount[] {
  const { volumes } = app;
  if (!volumes) return [];
  return app.config.volumes.map((mount) => ({
    source: volumes.source(app.projectId, mount.volume),
    target: mount.path,
    readOnly: mount.readOnly,
  }));
}

/**
 * Before an app version's replica (or template) starts: every volume of its `[volumes]` is here and mounted,
 * and each is shown where nothing of the app's own jail is. Throws an error naming the volume otherwise.
 */
export async function prepareVolumes(app: JailedApp, options: { jailed: boolean }): Promise<void> {
  const mounts = app.config.volumes;
  if (!mounts.length) return;
  if (!options.jailed) {
    throw new Error("its [volumes] are shown only in a jail, and the sandbox is off here (RUNPLANE_SANDBOX)");
  }
  if (!app.volumes) throw new Error("this server serves no project volumes (RUNPLANE_VOLUMES_DIR)");
  const home = interpreterHome(app.config.python, { appDir: app.dir, source: app.source, venv: app.venv });
  const own = [
    app.dir,
    ...(home ? [home] : []),
    ...(app.image?.process?.workingDir ? [app.image.process.workingDir] : []),
  ];
  for (const mount of mounts) {
    const problem = volumeTargetProblem(mount.path, own);
    if (problem) throw new Error(`volumes.${mount.name}: ${problem}`);
    await app.volumes.ready(app.projectId, mount.volume, { app: app.name });
  }
}

/** The jail of one app version's replicas (with its `[volumes]` when `app.volumes` is given). */
export function replicaJail(app: JailedApp, secrets: Record<string, string>): JailSpec {
  const home = interpreterHome(app.config.python, { appDir: app.dir, source: app.source, venv: app.venv });
  const { env, egress, hardware } = app.config;
  // A pool sized for the host's cores would run many threads on a quota of a few: they follow `cpu`
  // unless the app's [env] says otherwise.
  const threads = String(Math.ceil(hardware.cpu));
  return {
    projectId: app.projectId,
    readOnly: home ? [app.dir, home] : [app.dir],
    // A Dockerfile's WORKDIR is its process's folder; otherwise the app's own.
    cwd: app.image?.process?.workingDir ?? app.dir,
    egress,
    // The image's ENV under the app's; secrets last: a name in both is the project's secret (the app's
    // [env] is in its bundle, readable).
    env: {
      ...app.image?.env,
      ...Object.fromEntries(THREAD_VARIABLES.map((name) => [name, threads])),
      ...env,
      ...secrets,
    },
    tmpBytes: tmpBytesFor(hardware.memoryBytes),
    ...(app.config.volumes.length && app.volumes ? { mounts: volumeMounts(app) } : {}),
    ...(app.image ? { image: { root: app.image.root } } : {}),
  };
}

/**
 * `jail` for one replica holding `gpus`: `CUDA_VISIBLE_DEVICES` names them (empty: no GPU) in PCI bus
 * order (`CUDA_DEVICE_ORDER`, nvidia-smi's), and their device nodes (found in `deviceDir`, default `/dev`)
 * with the driver's shared ones are bound in. Set last: neither `[env]` nor a secret may name other GPUs.
 * In an image, a replica holding GPUs is also shown the host's driver libraries and `nvidia-smi` (found as
 * `findDriverFiles` does, with `driver`), as the NVIDIA container toolkit does: they must match the host's
 * kernel driver. On the host's system they are already there; a replica holding no GPU gets none.
 */
export function replicaGpuJail(
  jail: JailSpec,
  gpus: readonly Gpu[],
  options: { deviceDir?: string; driver?: DriverFilesOptions } = {},
): JailSpec {
  const devices = gpuDeviceNodes(gpus, { dir: options.deviceDir });
  const driver = gpus.length && jail.image && !jail.image.writable ? findDriverFiles(options.driver) : undefined;
  return {
    ...jail,
    env: {
      ...jail.env,
      CUDA_VISIBLE_DEVICES: gpus.map((gpu) => gpu.id).join(","),
      CUDA_DEVICE_ORDER: "PCI_BUS_ID",
    },
    ...(devices.length ? { devices } : {}),
    ...(driver?.libraries.length ? { hostLibraries: driver.libraries } : {}),
    ...(driver?.programs.length ? { hostPrograms: driver.programs } : {}),
  };
}
