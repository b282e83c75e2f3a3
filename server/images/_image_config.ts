/** An image's run settings (its config's `ENV`, `CMD`, `ENTRYPOINT`, `WORKDIR`, `EXPOSE`, `USER`), read from the store. */
import { readJsonBlob } from "./_oci_blobs.ts";

/** What an image says about how it runs; fields the image leaves out are empty or null. */
export interface ImageConfig {
  /** `ENV`, as `NAME=value` strings in the image's order. */
  env: string[];
  /** `CMD`, or null when the image sets none. */
  cmd: string[] | null;
  /** `ENTRYPOINT`, or null when the image sets none. */
  entrypoint: string[] | null;
  /** `WORKDIR`, or null when the image sets none. */
  workingDir: string | null;
  /** `EXPOSE`, as the image writes them: `8080/tcp`. */
  exposedPorts: string[];
  /** `USER`, or null when the image sets none (a replica runs as its project's uid whatever this says). */
  user: string | null;
}

const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";

function record(value: unknown): Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value) ? value as Record<string, unknown> : {};
}

function strings(value: unknown, what: string): string[] | null {
  if (value === undefined || value === null) return null;
  if (Array.isArray(value) && value.every((item) => typeof item === "string")) return value;
  throw new Error(`The image's ${what} is not a list of strings`);
}

function text(value: unknown): string | null {
  return typeof value === "string" && value !== "" ? value : null;
}

/** The config blob's digest named by the manifest `digest`; throws when that is no single-platform OCI manifest. */
async function configDigest(layout: string, digest: string): Promise<string> {
  const manifest = record(await readJsonBlob(layout, digest));
  if (manifest.mediaType !== undefined && manifest.mediaType !== OCI_MANIFEST) {
    throw new Error(`The image ${digest} is a ${String(manifest.mediaType)}, not an image manifest`);
  }
  const config = record(manifest.config).digest;
  if (typeof config !== "string") throw new Error(`The image manifest ${digest} names no config`);
  return config;
}

/** Reads the run settings of the image whose manifest is `digest` in the OCI layout `layout`. */
export async function readImageConfig(layout: string, digest: string): Promise<ImageConfig> {
  const blob = record(await readJsonBlob(layout, await configDigest(layout, digest)));
  const config = record(blob.config);
  return {
    env: strings(config.Env, "Env") ?? [],
    cmd: strings(config.Cmd, "Cmd"),
    entrypoint: strings(config.Entrypoint, "Entrypoint"),
    workingDir: text(config.WorkingDir),
    exposedPorts: Object.keys(record(config.ExposedPorts)),
    user: text(config.User),
  };
}

/** The image's `ENV` lines as variables (a line without `=` names an empty one). */
export function imageEnvironment(lines: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of lines) {
    const at = line.indexOf("=");
    if (at > 0) env[line.slice(0, at)] = line.slice(at + 1);
    else if (at < 0 && line) env[line] = "";
  }
  return env;
}
