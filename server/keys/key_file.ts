/**
 * A key kept in a file of the data dir: read it, or create it on first use, private to the server's user.
 * Shared by the token-signing key (`server/auth`) and the secret box's key (`server/secrets`).
 */
import { randomBytes } from "node:crypto";
import { chmod, link, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { dirname } from "node:path";

/**
 * Returns the bytes of the key file at `path`. When there is none yet, writes `create()`'s bytes to it
 * (mode 0600, its folder made 0700) and returns them; when another process creates the file meanwhile,
 * theirs is kept and returned. Any other read or write error is thrown.
 *
 * @example
 * ```ts
 * const key = await loadOrCreateKeyFile(join(dataDir, "keys", "secret_box.key"), () => randomBytes(32));
 * ```
 */
export async function loadOrCreateKeyFile(
  path: string,
  create: () => Uint8Array | string | Promise<Uint8Array | string>,
): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
  const contents = await create();
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  // Written whole to a file of its own, then linked into place: `link` fails if another process put its
  // key there first (then theirs is used), and nobody ever reads a key file half written.
  const temporary = `${path}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    await writeFile(temporary, contents, { mode: 0o600, flag: "wx" });
    // Whatever the umask, the key is 0600.
    await chmod(temporary, 0o600);
    await link(temporary, path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  } finally {
    await rm(temporary, { force: true });
  }
  return await readFile(path);
}
