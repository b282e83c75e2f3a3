/**
 * Lease owners of this data dir: each run service writes `<dir>/<owner>.json` with its host name and
 * pid, so a restart can end the runs of a process that is provably dead (same host, no such pid) at
 * once instead of waiting for their leases to run out. A process that may be alive is never judged dead:
 * another host's (or container's) owners, and any pid that exists, are left to the lease.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";

interface OwnerFile {
  host: string;
  pid: number;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== "ESRCH";
  }
}

/** Records that `owner` is this process. */
export function registerOwner(dir: string, owner: string): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${owner}.json`), JSON.stringify({ host: hostname(), pid: process.pid } satisfies OwnerFile));
}

/** Removes `owner`'s record (on a clean stop, or once its runs were ended). */
export function forgetOwner(dir: string, owner: string): void {
  rmSync(join(dir, `${owner}.json`), { force: true });
}

/** Owners recorded in `dir` whose process is gone: same host, and no process with that pid. */
export function deadOwners(dir: string, self: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const host = hostname();
  const dead: string[] = [];
  for (const name of names) {
    const owner = name.replace(/\.json$/, "");
    if (owner === self || owner === name) continue;
    try {
      const record = JSON.parse(readFileSync(join(dir, name), "utf8")) as OwnerFile;
      if (record.host === host && Number.isInteger(record.pid) && record.pid !== process.pid && !alive(record.pid)) {
        dead.push(owner);
      }
    } catch {
      // Half-written or unreadable: leave it to the lease.
    }
  }
  return dead;
}
