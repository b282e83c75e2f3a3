/**
 * Lease owners of this host: each run service writes `<dir>/<owner>.json` with its host name, pid and
 * the pid's start time, so that upkeep can tell, for an owner of this host, whether its process is gone
 * (no such process: its runs are ended at once instead of after their leases) or alive (a lease that ran
 * out means it was blocked from the store, not gone: its runs are left to it). Another host's owners,
 * and any record that cannot be read, are left to the lease.
 */
import { lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";

interface OwnerFile {
  host: string;
  pid: number;
  /** The process's start time (`/proc/<pid>/stat`'s 22nd field), so that a reused pid is not taken for it. */
  started?: string | null;
}

/**
 * Where the run services of this host record their lease owners: with SQLite the data dir (the
 * processes that share it share the store); with a shared store a folder of this user in the system's
 * temporary dir, which every process of this host sharing the store sees (processes that do not share
 * the store never look up each other's owners).
 */
export function runOwnersDir(dataDir: string, options: { sharedStore: boolean }): string {
  if (!options.sharedStore) return join(dataDir, "run-owners");
  return join(tmpdir(), `runplane-run-owners-${process.getuid?.() ?? "user"}`);
}

/** When `pid` started (clock ticks since boot), or null where `/proc` does not say. */
function processStart(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (2nd field) may hold spaces and parentheses: fields are counted after its last ")".
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? null;
  } catch {
    return null;
  }
}

function exists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== "ESRCH";
  }
}

/**
 * Whether `dir` may be trusted: a directory (not a link) of this process's user that nobody else may
 * write, so that no other local user can plant a record that keeps a dead owner's runs "alive".
 */
function trusted(dir: string): boolean {
  try {
    const stat = lstatSync(dir);
    return stat.isDirectory() && stat.uid === process.getuid?.() && (stat.mode & 0o022) === 0;
  } catch {
    return false;
  }
}

/** Records that `owner` is this process (nothing when `dir` cannot be trusted). */
export function registerOwner(dir: string, owner: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (!trusted(dir)) return;
  const record: OwnerFile = { host: hostname(), pid: process.pid, started: processStart(process.pid) };
  writeFileSync(join(dir, `${owner}.json`), JSON.stringify(record), { mode: 0o600 });
}

/** Removes `owner`'s record (on a clean stop, or once its runs were ended). */
export function forgetOwner(dir: string, owner: string): void {
  rmSync(join(dir, `${owner}.json`), { force: true });
}

/** What this host knows of an owner's process. */
export type OwnerState = "alive" | "dead" | "unknown";

/** Whether `owner`'s process is alive or gone, as far as this host can prove; `unknown` otherwise. */
export function ownerState(dir: string, owner: string): OwnerState {
  if (!/^[\w.-]+$/.test(owner) || !trusted(dir)) return "unknown";
  let record: OwnerFile;
  try {
    record = JSON.parse(readFileSync(join(dir, `${owner}.json`), "utf8")) as OwnerFile;
  } catch {
    return "unknown"; // none, half-written or unreadable: leave it to the lease
  }
  if (record.host !== hostname() || !Number.isInteger(record.pid)) return "unknown";
  if (record.pid === process.pid) return "alive";
  if (!exists(record.pid)) return "dead";
  // A pid that exists is the owner's unless its start time says it was reused.
  return record.started && processStart(record.pid) !== record.started ? "dead" : "alive";
}

/** Owners recorded in `dir`, other than `self`, whose process is gone. */
export function deadOwners(dir: string, self: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names.filter((name) => name.endsWith(".json")).map((name) => name.slice(0, -".json".length))
    .filter((owner) => owner !== self && ownerState(dir, owner) === "dead");
}
