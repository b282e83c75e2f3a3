/**
 * Writing a bundle's entries into its folder, one at a time as the tar stream yields them (see
 * `extractBundle`): each entry's type, path and size is checked before a byte of it is written, and
 * nothing is ever written outside the folder.
 */
import { mkdir, open } from "node:fs/promises";
import { dirname, join } from "node:path";
import { pipeline } from "node:stream/promises";
import type { ExtractEvents, Header as TarHeader } from "tar-stream";
import { checkType, refused, safeRelativePath, tooLarge } from "./_bundle_entry_checks.ts";

/** Options of `BundleWriter`. */
export interface BundleWriterOptions {
  /** Entries (files and folders) the bundle may hold. */
  maxFiles: number;
  /** Bytes of all files together, once unpacked. */
  maxUnpackedBytes: number;
}

/** The entries of one bundle written into `dir`, with what they made so far. */
export class BundleWriter {
  readonly #dir: string;
  readonly #limits: BundleWriterOptions;
  // Every path the bundle made so far, with what it is: a file never becomes a folder, nor the reverse.
  readonly #kinds = new Map<string, "file" | "directory">([["", "directory"]]);
  // Folders made on disk so far: each is made once, not once per file in it.
  readonly #made: Set<string>;
  #entries = 0;
  #files = 0;
  #bytes = 0;

  /** A writer into `dir` (made, and empty). */
  constructor(dir: string, limits: BundleWriterOptions) {
    this.#dir = dir;
    this.#limits = limits;
    this.#made = new Set<string>([dir]);
  }

  /** The files written so far. */
  get files(): number {
    return this.#files;
  }

  /** The bytes of the files written so far. */
  get bytes(): number {
    return this.#bytes;
  }

  /** Checks one entry and writes it (a folder, or a file with the bytes of `stream`); throws a problem to refuse it. */
  async unpack(header: TarHeader, stream: ExtractEvents["entry"][1]): Promise<void> {
    const { maxFiles, maxUnpackedBytes } = this.#limits;
    checkType(header);
    const path = safeRelativePath(header.name);
    if (++this.#entries > maxFiles) throw tooLarge(`${header.name}: the bundle has more than ${maxFiles} entries`);
    const size = header.type === "file" ? header.size ?? 0 : 0;
    // The header says how many bytes follow, and tar holds no more: refusing here stops a bomb before
    // a byte of it is unpacked.
    if (this.#bytes + size > maxUnpackedBytes) {
      throw tooLarge(`${header.name}: the bundle unpacks to more than ${maxUnpackedBytes} bytes`);
    }
    if (path === "" && header.type === "directory") return void stream.resume();
    if (path === "") throw refused(`${header.name}: a file needs a name`);
    this.#claim(header, path);
    const target = join(this.#dir, path);
    if (header.type === "directory") {
      await this.#makeFolder(target).catch((error: NodeJS.ErrnoException) => {
        if (error.code === "ENAMETOOLONG") throw refused(`${header.name}: the name is too long to unpack`);
        throw error;
      });
      return void stream.resume();
    }
    await this.#writeFile(header, { target, size, stream });
    this.#bytes += size;
    this.#files++;
  }

  #claim(header: TarHeader, path: string): void {
    const kind = header.type === "directory" ? "directory" : "file";
    const segments = path.split("/");
    for (let i = 1; i < segments.length; i++) {
      const parent = segments.slice(0, i).join("/");
      if (this.#kinds.get(parent) === "file") {
        throw refused(`${header.name}: its folder ${parent} is a file in the bundle`);
      }
      this.#kinds.set(parent, "directory");
    }
    const before = this.#kinds.get(path);
    if (before === "file" && kind === "file") throw refused(`${header.name}: the bundle holds this file twice`);
    if (before !== undefined && before !== kind) {
      throw refused(`${header.name}: the bundle holds this path both as a file and as a folder`);
    }
    this.#kinds.set(path, kind);
  }

  async #makeFolder(path: string): Promise<void> {
    if (this.#made.has(path)) return;
    await mkdir(path, { recursive: true });
    this.#made.add(path);
  }

  /** Writes a file entry at `target` (new, in a folder made as needed) with its mode. */
  async #writeFile(
    header: TarHeader,
    entry: { target: string; size: number; stream: ExtractEvents["entry"][1] },
  ): Promise<void> {
    const { target, size, stream } = entry;
    const mode = (header.mode ?? 0o644) & 0o111 ? 0o755 : 0o644;
    // Links are refused, so no folder inside `dir` is one and `mkdir` follows nothing out of it; "wx" never
    // opens an existing path, so nothing the bundle made earlier can redirect a write.
    const file = await this.#makeFolder(dirname(target)).then(() => open(target, "wx", mode)).catch(
      (error: NodeJS.ErrnoException) => {
        // Two names for one path, e.g. on a case-insensitive file system.
        if (error.code === "EEXIST" || error.code === "ENOTDIR" || error.code === "EISDIR") {
          throw refused(`${header.name}: another entry of the bundle already uses this path`);
        }
        // Within the limits above, yet too long here (a file system with shorter names, say).
        if (error.code === "ENAMETOOLONG") throw refused(`${header.name}: the name is too long to unpack`);
        throw error;
      },
    );
    try {
      await file.chmod(mode); // exact, whatever the process's umask
    } catch (error) {
      await file.close();
      throw error;
    }
    if (size === 0) {
      await file.close();
      stream.resume();
    } else {
      await pipeline(stream, file.createWriteStream());
    }
  }
}
