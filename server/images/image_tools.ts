/**
 * The tools images are made with, found on this host: Debian's `skopeo` (copies images from registries into
 * the store), `umoci` (unpacks them), and, for the builds that come next, `buildah` and `mmdebstrap`. A host
 * without the required ones serves apps without `base_image` and refuses those with one, naming what to
 * install.
 */
import { constants } from "node:fs";
import { access, stat } from "node:fs/promises";
import { delimiter, isAbsolute, join } from "node:path";

/** The tools looked for: the first two are required to pull and unpack; the others are reported. */
export const IMAGE_TOOL_NAMES = ["skopeo", "umoci", "buildah", "mmdebstrap"] as const;

/** One of {@link IMAGE_TOOL_NAMES}. */
export type ImageToolName = typeof IMAGE_TOOL_NAMES[number];

/** The tools without which no image is pulled or unpacked. */
export const REQUIRED_IMAGE_TOOLS: readonly ImageToolName[] = ["skopeo", "umoci"];

/** Where each tool was found (an absolute path), or null; `missing` lists the required ones not found. */
export interface ImageTools {
  paths: Record<ImageToolName, string | null>;
  /** The required tools not found, in {@link REQUIRED_IMAGE_TOOLS}' order; empty when images work here. */
  missing: ImageToolName[];
}

/** Options of {@link findImageTools}. */
export interface FindImageToolsOptions {
  /** The search path, as `PATH` writes it; `process.env.PATH` by default. `/usr/bin` and `/usr/sbin` are searched after it. */
  path?: string;
}

async function executable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/** The folders searched: `PATH`'s absolute entries (a relative one would depend on the working directory), then Debian's. */
function searchFolders(path: string): string[] {
  const folders = path.split(delimiter).filter((folder) => isAbsolute(folder));
  return [...new Set([...folders, "/usr/bin", "/usr/sbin"])];
}

async function findTool(name: string, folders: string[]): Promise<string | null> {
  for (const folder of folders) {
    const candidate = join(folder, name);
    if (await executable(candidate)) return candidate;
  }
  return null;
}

/**
 * Finds the image tools on `PATH`, `/usr/bin` and `/usr/sbin`. It only looks: a tool that is found but broken
 * fails when it is first used, with its own message.
 */
export async function findImageTools(options: FindImageToolsOptions = {}): Promise<ImageTools> {
  const folders = searchFolders(options.path ?? process.env.PATH ?? "");
  const found = await Promise.all(IMAGE_TOOL_NAMES.map((name) => findTool(name, folders)));
  const paths = Object.fromEntries(IMAGE_TOOL_NAMES.map((name, i) => [name, found[i]!])) as ImageTools["paths"];
  const missing = REQUIRED_IMAGE_TOOLS.filter((name) => paths[name] === null);
  return { paths, missing };
}

/** The refusal for an app with `base_image` on a host that lacks tools; null when none is missing. */
export function missingToolsMessage(tools: ImageTools): string | null {
  if (tools.missing.length === 0) return null;
  const names = tools.missing.join(" and ");
  return `This server cannot run apps with a base_image: ${names} ${tools.missing.length > 1 ? "are" : "is"} `
    + `not installed on the host; ask the operator to install ${names} (apt-get install ${tools.missing.join(" ")}), `
    + `or deploy without [build] base_image to run on the host's system`;
}
