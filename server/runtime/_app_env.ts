/**
 * An app's `[env]`: variables its replicas get on top of the environment the platform builds for them.
 * The platform's own variables are not the app's to set, so they are refused here, in one list.
 */

/** The most variables one `[env]` table may hold. */
export const MAX_ENV_VARIABLES = 128;
/** The most bytes of one value (Linux refuses a single environment string past 128 KiB). */
export const MAX_ENV_VALUE_BYTES = 32 * 1024;
/** The most bytes of every name and value together. */
export const MAX_ENV_TOTAL_BYTES = 64 * 1024;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Names the platform sets for a replica, each for a reason an app must not override: where programs and
 * the home folder are (`PATH`, `HOME`, `TMPDIR`: the sandbox's private ones), where the custom runtime
 * listens (`PORT`), how the Python worker starts and finds its code (`PYTHONPATH`, `PYTHONHOME`,
 * `PYTHONUNBUFFERED`, `VIRTUAL_ENV`), and which GPUs it was given (`CUDA_VISIBLE_DEVICES`,
 * `CUDA_DEVICE_ORDER`, `NVIDIA_VISIBLE_DEVICES`).
 */
export const RESERVED_ENV_NAMES: ReadonlySet<string> = new Set([
  "PATH",
  "HOME",
  "TMPDIR",
  "PORT",
  "PYTHONPATH",
  "PYTHONHOME",
  "PYTHONUNBUFFERED",
  "VIRTUAL_ENV",
  "CUDA_VISIBLE_DEVICES",
  "CUDA_DEVICE_ORDER",
  "NVIDIA_VISIBLE_DEVICES",
]);

/**
 * Prefixes refused as a whole: `RUNPLANE_` is the server's own settings (some secret), and `LD_` the
 * dynamic loader's (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `LD_AUDIT`, …), which would load code into the
 * platform's worker before the app's.
 */
export const RESERVED_ENV_PREFIXES: readonly string[] = ["RUNPLANE_", "LD_"];

/** Why `name` cannot be an `[env]` variable, or null. */
export function envNameProblem(name: string): string | null {
  if (!ENV_NAME.test(name)) {
    return "is not an environment variable name: use letters, digits and _, not starting with a digit";
  }
  // Names are compared as the kernel and libc do: case matters (`path` is not `PATH`).
  const prefix = RESERVED_ENV_PREFIXES.find((p) => name.startsWith(p));
  if (prefix) return `is reserved: names starting with ${prefix} are the platform's; choose another name`;
  if (RESERVED_ENV_NAMES.has(name)) return "is set by the platform; choose another name";
  return null;
}

/** Why `value` cannot be an `[env]` value, or null. */
export function envValueProblem(value: unknown): string | null {
  if (typeof value !== "string") return "must be a string (quote numbers and booleans)";
  if (value.includes("\0")) return "holds a NUL character, which an environment cannot carry";
  if (Buffer.byteLength(value) > MAX_ENV_VALUE_BYTES) return `is longer than ${MAX_ENV_VALUE_BYTES / 1024} KiB`;
  return null;
}
