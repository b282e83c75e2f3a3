/**
 * The data dir's start-up step: create it when missing, make it and its `keys/` folder private to the
 * server's user, and check it can be read and written. Kept out of `loadConfig` so that reading settings
 * has no side effect; `createServer` runs it first.
 *
 * The data dir holds the store, the key files and sealed secrets, and jailed processes run as other uids
 * when the server is root: the security model holds only while both folders are 0700 and the server's.
 * So a folder made looser before the first start (an operator's `mkdir`, 0755) is tightened at every
 * start, and one the server does not own stops the start: its owner could open it up again at any time.
 *
 * Symbolic links: a data dir path that is itself a link is the operator's choice of where the data lives,
 * and the folder it names is checked and fixed. The `keys` folder inside is opened without following a
 * link (`O_NOFOLLOW`): a link there would put the keys wherever it points, so it stops the start.
 */
import {
  accessSync,
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  realpathSync,
} from "node:fs";
import { join } from "node:path";

/** Raised when the data dir cannot be made, written or made private; the message says which and what to do. */
export class DataDirError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DataDirError";
  }
}

/** Options of `prepareDataDir`. */
export interface PrepareDataDirOptions {
  /** Told (one warning line per folder) when a folder's mode was tightened: the server's logger. */
  logger?: { warn(fields: Record<string, unknown>, message: string): void };
}

/** A folder's permission bits as `chmod` writes them: `0755`. */
function octal(mode: number): string {
  return `0${(mode & 0o777).toString(8).padStart(3, "0")}`;
}

function codeOf(error: unknown): string {
  return (error as NodeJS.ErrnoException).code ?? (error as Error).message;
}

/** The server's effective uid; undefined where there is none (not POSIX). */
function serverUid(): number | undefined {
  return process.geteuid?.();
}

/**
 * Makes the open folder `fd` (at `path`, what `what` names in messages) the server's and 0700: refuses a
 * folder another user owns, and tightens a looser mode, saying so in the log.
 */
function makePrivate(fd: number, at: { path: string; what: string }, options: PrepareDataDirOptions): void {
  const { path, what } = at;
  const stats = fstatSync(fd);
  const uid = serverUid();
  if (uid !== undefined && stats.uid !== uid) {
    throw new DataDirError(
      `${path} belongs to uid ${stats.uid}, not to the server's user (uid ${uid}), so that user could open it up again; run \`chown -R ${uid} ${path}\` and \`chmod 700 ${path}\`, or start the server as its owner`,
    );
  }
  if ((stats.mode & 0o077) === 0) return;
  try {
    fchmodSync(fd, 0o700);
  } catch (error) {
    throw new DataDirError(
      `${path} is ${octal(stats.mode)} and cannot be made private (${
        codeOf(error)
      }); run \`chmod 700 ${path}\` as its owner`,
    );
  }
  options.logger?.warn(
    { path, old_mode: octal(stats.mode), new_mode: "0700" },
    `${what} ${path} was ${octal(stats.mode)}, open to other users: made it 0700`,
  );
}

/** `makePrivate` on the folder at `path`, opened without following a link when `follow` is false. */
function makeFolderPrivate(
  path: string,
  options: PrepareDataDirOptions & { what: string; follow: boolean },
): void {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_DIRECTORY | (options.follow ? 0 : constants.O_NOFOLLOW));
  } catch (error) {
    const code = codeOf(error);
    if (code === "ENOENT" && !options.follow) return; // made 0700 when the first key is written
    // With O_DIRECTORY, Linux answers ENOTDIR (not ELOOP) for a link: lstat tells which it was.
    if (!options.follow && (code === "ELOOP" || lstatSync(path, { throwIfNoEntry: false })?.isSymbolicLink())) {
      throw new DataDirError(
        `${path} is a symbolic link; the keys must live in the data dir itself: replace the link with a folder (move the files it points to into it)`,
      );
    }
    throw new DataDirError(`${path} is not a writable folder (${code})`);
  }
  try {
    makePrivate(fd, { path, what: options.what }, options);
  } finally {
    closeSync(fd);
  }
}

/**
 * Creates `path` (mode 0700) when missing, makes it and its `keys/` folder 0700 when they are looser
 * (logging each change with the old mode), and checks it is readable and writable. Throws a
 * `DataDirError` saying what to do when it is not a writable folder, belongs to another user, cannot be
 * made private, or when `keys/` is a symbolic link.
 */
export function prepareDataDir(path: string, options: PrepareDataDirOptions = {}): void {
  let real: string;
  try {
    mkdirSync(path, { recursive: true, mode: 0o700 });
    // A link as the data dir is the operator's choice: what it names is the folder to check and fix.
    real = realpathSync(path);
  } catch (error) {
    throw new DataDirError(`${path} is not a writable folder (${codeOf(error)})`);
  }
  makeFolderPrivate(real, { ...options, what: "the data dir", follow: true });
  makeFolderPrivate(join(real, "keys"), { ...options, what: "the keys folder", follow: false });
  try {
    accessSync(real, constants.W_OK | constants.R_OK);
  } catch (error) {
    throw new DataDirError(`${path} is not a writable folder (${codeOf(error)})`);
  }
}
