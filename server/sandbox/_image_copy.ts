/**
 * A build step's own copy of an image root, for the writable jail (`ImageRoot.writable`): made by the
 * server from a root nothing tenant-run can write, then given to the step's principal, whose uid 0 inside
 * its user namespace is that uid on the host.
 */
import { execFile } from "node:child_process";
import { lstat } from "node:fs/promises";
import { isAbsolute, normalize } from "node:path";
import { promisify } from "node:util";
import { identityFor } from "./_identity.ts";

const execFileAsync = promisify(execFile);

function checkedPath(path: string, what: string): string {
  if (!isAbsolute(path) || normalize(path) !== path || path === "/") {
    throw new Error(`${what} must be an absolute, normal path other than /: ${JSON.stringify(path)}`);
  }
  return path;
}

/**
 * Copies the image root `source` to `target` (which must not exist) and gives the copy to `principal`'s uid
 * (a root server; an unprivileged server's copy is its own, which is what its user namespace maps).
 *
 * `cp -a` copies links as links and never follows them; `chown -hR` changes links themselves and does not
 * descend through them. Both walk a tree no tenant process can write while they run: `source` is only ever
 * bound read-only, and `target` is new, its principal's first step starting after this resolves.
 */
export async function copyImageRoot(source: string, target: string, options: { principal: string }): Promise<void> {
  checkedPath(source, "The image root");
  checkedPath(target, "The copy");
  if (!(await lstat(source)).isDirectory()) throw new Error(`The image root ${source} is not a folder`);
  if (await lstat(target).then(() => true, () => false)) throw new Error(`The copy ${target} exists already`);
  await execFileAsync("cp", ["-a", "--reflink=auto", "--", source, target], { maxBuffer: 1 << 20 });
  const identity = identityFor(options.principal);
  if (identity.kind === "root") {
    await execFileAsync("chown", ["-hR", `${identity.uid}:${identity.gid}`, "--", target], { maxBuffer: 1 << 20 });
  }
}
