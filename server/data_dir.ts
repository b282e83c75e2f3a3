/**
 * The data dir's start-up step: create it when missing and check it can be read and written. Kept out of
 * `loadConfig` so that reading settings has no side effect; `createServer` runs it first.
 */
import { accessSync, constants, mkdirSync } from "node:fs";

/** Raised when the data dir cannot be made or written; the message says which and why. */
export class DataDirError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DataDirError";
  }
}

/**
 * Creates `path` (mode 0700: it holds the store, keys and sealed secrets, so a folder made here is private
 * to the server's user) and checks it is readable and writable. Throws a `DataDirError`
 * `<path> is not a writable folder (<code>)` otherwise.
 */
export function prepareDataDir(path: string): void {
  try {
    mkdirSync(path, { recursive: true, mode: 0o700 });
    accessSync(path, constants.W_OK | constants.R_OK);
  } catch (error) {
    throw new DataDirError(
      `${path} is not a writable folder (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`,
    );
  }
}
