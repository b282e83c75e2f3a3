/**
 * What an app's replicas may see: its folder read-only, the environment its interpreter lives in, its
 * own `[env]` and its project's secrets — nothing of the server's.
 */
import { dirname, isAbsolute, relative } from "node:path";
import { type DriverFilesOptions, findDriverFiles, type Gpu, gpuDeviceNodes } from "../gpus/mod.ts";
import type { JailSpec } from "../sandbox/mod.ts";
import type { AppConfig } from "./_app_config.ts";
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

/** The jail of one app version's replicas. */
export function replicaJail(
  app: { projectId: string; dir: string; source: AppSource; config: AppConfig; venv?: string; image?: AppImage },
  secrets: Record<string, string>,
): JailSpec {
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
