/**
 * Text set aside on disk while a run goes on, so that memory does not hold it: a stream's stored items
 * past the first 64 KiB. A reader that stops reading keeps its stream open for as long as it likes,
 * and the stored prefix (up to the 1 MiB result limit) held in memory was most of the ~1.5 MiB that
 * each of 100 stalled readers kept alive.
 *
 * The file is created in the system's temporary folder (mode 0600, a name no one else holds) and
 * unlinked at once: only its descriptor reaches it, and the kernel frees it when the descriptor is
 * closed or the process dies, so a crash leaves nothing behind. Reads and writes are synchronous: they
 * go to the page cache, a few tens of microseconds per 64 KiB appended, and happen once per that much
 * text, which is cheaper than the promise and the ordering an asynchronous append would need.
 */
import { closeSync, openSync, readSync, unlinkSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Append-only text in an unlinked temporary file; `take` reads it back once and frees it. */
export class SpillFile {
  #fd: number | undefined;
  #bytes = 0;

  /** Appends text (as UTF-8), or `parts` in order: text or bytes. */
  append(parts: string | ReadonlyArray<string | Uint8Array>): void {
    if (this.#fd === undefined) this.#fd = openUnlinked();
    if (typeof parts === "string") return this.#write(Buffer.from(parts, "utf8"));
    // Consecutive text is encoded once; bytes are written as they are.
    let text = "";
    for (const part of parts) {
      if (typeof part === "string") {
        text += part;
        continue;
      }
      if (text) this.#write(Buffer.from(text, "utf8"));
      text = "";
      this.#write(part);
    }
    if (text) this.#write(Buffer.from(text, "utf8"));
  }

  #write(data: Uint8Array): void {
    let written = 0;
    while (written < data.length) {
      written += writeSync(this.#fd!, data, written, data.length - written, this.#bytes + written);
    }
    this.#bytes += data.length;
  }

  /** Reads back everything appended and closes the file (an empty string when nothing was). */
  take(): string {
    const fd = this.#fd;
    if (fd === undefined) return "";
    const data = Buffer.allocUnsafe(this.#bytes);
    let read = 0;
    while (read < data.length) {
      const n = readSync(fd, data, read, data.length - read, read);
      if (n === 0) throw new Error("Spilled stream items were cut short on disk; the temporary folder may be full");
      read += n;
    }
    this.close();
    return data.toString("utf8");
  }

  /** Closes the file, dropping its text (idempotent). */
  close(): void {
    if (this.#fd === undefined) return;
    closeSync(this.#fd);
    this.#fd = undefined;
    this.#bytes = 0;
  }
}

function openUnlinked(): number {
  const path = join(tmpdir(), `runplane-spill-${process.pid}-${crypto.randomUUID()}`);
  // wx: created here, never an existing file (or a link someone planted under the name).
  const fd = openSync(path, "wx+", 0o600);
  unlinkSync(path);
  return fd;
}
