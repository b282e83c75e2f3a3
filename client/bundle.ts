/**
 * Packing an app folder as a deploy bundle: a gzip tarball of its files and folders (symlinks skipped),
 * in path order with fixed times and modes, so an unchanged folder packs to the same bytes and so to the
 * same digest (the server stores it once).
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { pack } from "tar-stream";
import { createGzip } from "node:zlib";

/** What `runplane deploy` never uploads: VCS data, caches and local virtualenvs. */
export const DEFAULT_EXCLUDES: readonly string[] = [".git", "__pycache__", ".venv", "*.pyc"];

/**
 * A glob as a RegExp over a `/`-separated path: `*` and `?` stay within one segment; `**` as a whole segment
 * spans any number of folders, none included, and a trailing one matches its folder too (`data/**`: `data`
 * and all inside it).
 */
function globRegExp(pattern: string): RegExp {
  let source = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "*" && pattern[i + 1] === "*") {
      const segmentStart = i === 0 || pattern[i - 1] === "/";
      if (segmentStart && pattern[i + 2] === "/") {
        source += "(?:.*/)?";
        i += 2;
      } else if (segmentStart && i > 0 && i + 2 === pattern.length) {
        source = `${source.slice(0, -1)}(?:/.*)?`;
        i += 1;
      } else {
        source += ".*";
        i += 1;
      }
    } else if (c === "*") source += "[^/]*";
    else if (c === "?") source += "[^/]";
    else source += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${source}$`);
}

/**
 * Whether `path` (relative, `/`-separated) is excluded: a pattern without `/` matches any segment's
 * name (`__pycache__`, `*.pyc`); one with `/` matches the path from the folder's root (`data/**`).
 */
function excluder(patterns: readonly string[]): (path: string) => boolean {
  const byName = patterns.filter((p) => !p.includes("/")).map(globRegExp);
  const byPath = patterns.filter((p) => p.includes("/")).map((p) => globRegExp(p.replace(/^\/+|\/+$/g, "")));
  return (path) =>
    byPath.some((r) => r.test(path)) || path.split("/").some((segment) => byName.some((r) => r.test(segment)));
}

/**
 * Whether `packBundle` leaves `path` (relative to the folder, `/`-separated) out, with `exclude` besides
 * `DEFAULT_EXCLUDES`; a path inside a left-out folder is left out too.
 */
export function bundleExcluder(exclude: readonly string[] = []): (path: string) => boolean {
  const excluded = excluder([...DEFAULT_EXCLUDES, ...exclude]);
  return (path) => {
    const segments = path.split("/");
    return segments.some((_, i) => excluded(segments.slice(0, i + 1).join("/")));
  };
}

/** The folder's files and folders in path order, excluded ones (and what is inside them) left out. */
async function listEntries(
  root: string,
  excluded: (path: string) => boolean,
): Promise<{ path: string; dir: boolean }[]> {
  const out: { path: string; dir: boolean }[] = [];
  async function walk(relative: string): Promise<void> {
    const names = (await readdir(join(root, relative), { withFileTypes: true }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of names) {
      const path = relative ? `${relative}/${entry.name}` : entry.name;
      if (excluded(path)) continue;
      if (entry.isDirectory()) {
        out.push({ path, dir: true });
        await walk(path);
      } else if (entry.isFile()) out.push({ path, dir: false });
    }
  }
  await walk("");
  return out;
}

/** Options of `packBundle`. */
export interface PackBundleOptions {
  /**
   * Patterns left out besides `DEFAULT_EXCLUDES`: without `/` one matches any file's or folder's name
   * (`*.md`, `tmp?`), with `/` the path from the folder's root (`data/**`, `docs/*.pdf`).
   */
  exclude?: readonly string[];
}

/**
 * Packs `dir` as a gzip tarball of its files and folders (symlinks and other special files skipped) with
 * `DEFAULT_EXCLUDES` and `options.exclude` left out; resolves with the bytes and the number of files.
 * Equal folders pack to equal bytes: entries in path order, mtime 0, owner 0, mode 0o755 or 0o644.
 */
export async function packBundle(
  dir: string,
  options: PackBundleOptions = {},
): Promise<{ bytes: Uint8Array; files: number }> {
  const entries = await listEntries(dir, excluder([...DEFAULT_EXCLUDES, ...(options.exclude ?? [])]));
  const tar = pack();
  const gzip = createGzip();
  const chunks: Buffer[] = [];
  gzip.on("data", (chunk: Buffer) => chunks.push(chunk));
  const done = new Promise<void>((resolve, reject) => {
    gzip.on("end", resolve);
    gzip.on("error", reject);
    tar.on("error", reject);
  });
  done.catch(() => {}); // awaited below; a failure while adding entries must not leave it unhandled
  tar.pipe(gzip);
  const mtime = new Date(0);
  let files = 0;
  try {
    for (const entry of entries) {
      if (entry.dir) {
        tar.entry({ name: `${entry.path}/`, type: "directory", mode: 0o755, mtime });
        continue;
      }
      const full = join(dir, entry.path);
      const executable = ((await stat(full)).mode & 0o111) !== 0;
      const content = await readFile(full);
      await new Promise<void>((resolve, reject) =>
        tar.entry(
          { name: entry.path, mode: executable ? 0o755 : 0o644, mtime },
          content,
          (error) => error ? reject(error) : resolve(),
        )
      );
      files++;
    }
  } catch (error) {
    tar.destroy();
    gzip.destroy();
    throw error;
  }
  tar.finalize();
  await done;
  return { bytes: new Uint8Array(Buffer.concat(chunks)), files };
}
