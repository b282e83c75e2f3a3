/**
 * The cgroups of one server's replicas: `<server's cgroup>/runplane/<server>/<replica>` in each hierarchy
 * (v1: the memory, cpu and pids ones; v2: the unified one), each replica's made with its limits, joined by
 * its first process, read for OOM kills when it ends, and removed with whatever is left in it.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { type Controller, CONTROLLERS } from "./_cgroup_layout.ts";

/** What one replica may use. */
export interface ResourceLimits {
  /** Cores: the CPU quota per period. */
  cpu: number;
  /** Bytes of memory, swap included (a replica never swaps beyond it). */
  memoryBytes: number;
  /** Processes and threads at once. */
  pids: number;
}

/** One replica's cgroup. */
export interface ReplicaCgroup {
  readonly name: string;
  readonly limits: ResourceLimits;
  /** The `cgroup.procs` files the replica's first process writes its pid to before it runs anything. */
  readonly procsFiles: string[];
  /** Whether the kernel's OOM killer killed a process of it: its memory limit was reached. */
  oomKilled(): boolean;
  /**
   * Begins, ahead of a move into this cgroup, the kernel's wait that the move would begin with
   * (`CgroupMovePrimer`); the server's cgroups make one at `create`, and a template before it forks.
   */
  primeJoin?(): void;
  /**
   * Kills whatever is left in it and removes it (retried while the kernel still counts exiting processes);
   * false when processes outlived ~5 s of that.
   */
  remove(): Promise<boolean>;
}

/** A hierarchy's folder for this server, and the controllers the replicas' limits use in it. */
export interface CgroupBase {
  dir: string;
  controllers: Controller[];
}

/** One file write that sets a limit: `file` in the replica's folder of the hierarchy holding `controller`. */
export interface LimitWrite {
  controller: Controller;
  file: string;
  value: string;
}

/** The scheduler period the CPU quota is given over (the kernel's default, 100 ms). */
export const CPU_PERIOD_US = 100_000;

/**
 * The files and values that set `limits`, in the order they must be written; `has(controller, file)`
 * says whether an optional file exists (swap accounting, `memory.oom.group`).
 */
export function limitWrites(
  version: "v1" | "v2",
  limits: ResourceLimits,
  has: (controller: Controller, file: string) => boolean,
): LimitWrite[] {
  const quota = String(Math.max(1000, Math.round(limits.cpu * CPU_PERIOD_US)));
  const memory = String(limits.memoryBytes);
  const writes: LimitWrite[] = [];
  const add = (controller: Controller, file: string, value: string) => writes.push({ controller, file, value });
  if (version === "v1") {
    add("memory", "memory.limit_in_bytes", memory);
    // memsw is memory and swap together: the same limit leaves no room to swap. Without swap accounting
    // (swapaccount=0) the kernel is asked not to swap the cgroup instead.
    if (has("memory", "memory.memsw.limit_in_bytes")) add("memory", "memory.memsw.limit_in_bytes", memory);
    else add("memory", "memory.swappiness", "0");
    add("cpu", "cpu.cfs_period_us", String(CPU_PERIOD_US));
    add("cpu", "cpu.cfs_quota_us", quota);
  } else {
    add("memory", "memory.max", memory);
    if (has("memory", "memory.swap.max")) add("memory", "memory.swap.max", "0");
    // One OOM kill takes the whole replica: no half-dead worker left serving.
    if (has("memory", "memory.oom.group")) add("memory", "memory.oom.group", "1");
    add("cpu", "cpu.max", `${quota} ${CPU_PERIOD_US}`);
  }
  add("pids", "pids.max", String(limits.pids));
  return writes;
}

/** The OOM kills a cgroup's memory files count: v1 `memory.oom_control`'s `oom_kill` (else `memory.failcnt`), v2 `memory.events`. */
export function oomKills(version: "v1" | "v2", read: (file: string) => string | undefined): number {
  const field = (text: string | undefined, name: string) => {
    const match = text === undefined ? null : new RegExp(`^${name} (\\d+)$`, "m").exec(text);
    return match ? Number(match[1]) : undefined;
  };
  if (version === "v2") {
    const events = read("memory.events");
    return (field(events, "oom_kill") ?? 0) + (field(events, "oom_group_kill") ?? 0);
  }
  // Kernels before 4.13 have no oom_kill count: a limit that was hit (failcnt) is the best sign left.
  return field(read("memory.oom_control"), "oom_kill") ?? Number(read("memory.failcnt")?.trim() || 0);
}

function readOrUndefined(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** The pids listed in a cgroup folder's `cgroup.procs`. */
function members(dir: string): number[] {
  return (readOrUndefined(join(dir, "cgroup.procs")) ?? "").split("\n").filter(Boolean).map(Number);
}

/** Kills every process of the cgroup folders `dirs` (v2 with `cgroup.kill`: at once, forks included). */
function killMembers(dirs: string[]): void {
  for (const dir of dirs) {
    if (existsSync(join(dir, "cgroup.kill"))) {
      try {
        writeFileSync(join(dir, "cgroup.kill"), "1");
        continue;
      } catch {
        // Fall back to one signal per process.
      }
    }
    for (const pid of members(dir)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Gone already.
      }
    }
  }
}

/** Removes cgroup folders deepest first, killing their processes, for up to ~5 s; false if some remain. */
export async function removeCgroupDirs(dirs: string[]): Promise<boolean> {
  let left = dirs.filter((dir) => existsSync(dir));
  for (let attempt = 0; left.length > 0 && attempt < 50; attempt++) {
    if (attempt > 0) await sleep(Math.min(200, 10 * attempt));
    killMembers(left);
    left = left.filter((dir) => {
      try {
        rmdirSync(dir);
        return false;
      } catch (error) {
        return (error as NodeJS.ErrnoException).code !== "ENOENT";
      }
    });
  }
  return left.length === 0;
}

/**
 * The sub-folders of `dir` (cgroups); empty when it cannot be read. A link is never followed: the entry's
 * own type is read, and a cgroup file system cannot hold links anyway.
 */
function subfolders(dir: string): string[] {
  try {
    return readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => join(dir, e.name));
  } catch {
    return [];
  }
}

/** Every folder below `dir`, deepest first: the order they can be removed in. */
function descendants(dir: string): string[] {
  return subfolders(dir).flatMap((child) => [...descendants(child), child]);
}

/** What a server makes of another server's folder under `runplane/` (see `judgeServerFolder`). */
export interface FolderVerdict {
  /** `gone`: its server is proved to have stopped; `running`: it has not; `unknown`: nothing is proved. */
  state: "gone" | "running" | "unknown";
  /** Why, for the log. */
  why: string;
}

/** Another server's folder, with what was made of it. */
export interface JudgedFolder extends FolderVerdict {
  /** Its name under `runplane/`. */
  name: string;
}

/** What `removeGone` did with the other folders under `runplane/`. */
export interface GoneCleanup {
  /** Folders of servers proved gone, removed from every hierarchy. */
  removed: JudgedFolder[];
  /** Folders of servers proved gone whose processes outlived the removal; tried again at the next start. */
  failed: JudgedFolder[];
  /** Folders left as they are: their server runs, or nothing proves it gone. */
  left: JudgedFolder[];
}

/**
 * This server's folder under each hierarchy's `runplane/`, made and readied for replicas' cgroups.
 *
 * Nothing here is written or removed through a link, and no tenant can have put one there: every folder
 * is on a cgroup file system (`checkCgroupFs` in `_cgroups.ts`), which holds no links (`symlink` fails
 * there) and no files but the kernel's; the folders are made by the server (root, or the owner of a
 * delegated cgroup), so their files are its own and not writable by others; and a jailed replica (under a
 * root server, a uid of its own) cannot reach them: its jail has no `/sys`, its cgroup namespace is its
 * own, and it holds no capability to mount a cgroup file system (test/sandbox/cgroup_tenant_test.ts
 * tries). A replica unjailed (`RUNPLANE_SANDBOX=off`) runs as the server's uid and could raise its own
 * limits: that setting is for the operator's own apps only.
 */
export class CgroupTree {
  readonly version: "v1" | "v2";
  /** This server's folder name under each `runplane/`. */
  readonly owner: string;
  readonly #bases: CgroupBase[];

  /** `bases`: each hierarchy's folder of the server (v2: one, with every controller). */
  constructor(version: "v1" | "v2", bases: CgroupBase[], owner: string) {
    this.version = version;
    this.#bases = bases;
    this.owner = owner;
  }

  /** How many hierarchies a replica's cgroup spans (v2: one). */
  get hierarchies(): number {
    return this.#bases.length;
  }

  /** The Runplane folders (`…/runplane`), one per hierarchy. */
  get parents(): string[] {
    return this.#bases.map((base) => join(base.dir, "runplane"));
  }

  #ownerDirs(): string[] {
    return this.parents.map((parent) => join(parent, this.owner));
  }

  /**
   * Makes `runplane/<owner>` in each hierarchy; on v2, enables the controllers for the folders below
   * each level (the server's own cgroup must then hold no process: see `createCgroups`).
   */
  prepare(): void {
    for (const dir of this.#ownerDirs()) mkdirSync(dir, { recursive: true });
    if (this.version === "v2") {
      const enable = CONTROLLERS.map((c) => `+${c}`).join(" ");
      const base = this.#bases[0].dir;
      for (const dir of [base, join(base, "runplane"), join(base, "runplane", this.owner)]) {
        writeFileSync(join(dir, "cgroup.subtree_control"), enable);
      }
    }
  }

  /**
   * Removes the folders of other servers that `judge` proves gone, with every cgroup below them, in every
   * hierarchy. Each name is judged once, whichever hierarchies hold it (a server killed while making its
   * folders has them in some only), and nothing is removed on a verdict other than `gone`.
   */
  async removeGone(judge: (name: string) => FolderVerdict): Promise<GoneCleanup> {
    const byName = new Map<string, string[]>();
    for (const parent of this.parents) {
      for (const dir of subfolders(parent)) {
        const name = basename(dir);
        if (name !== this.owner) byName.set(name, [...(byName.get(name) ?? []), dir]);
      }
    }
    const cleanup: GoneCleanup = { removed: [], failed: [], left: [] };
    for (const [name, dirs] of byName) {
      const judged = { name, ...judge(name) };
      if (judged.state !== "gone") cleanup.left.push(judged);
      else if (await removeCgroupDirs([...dirs.flatMap(descendants), ...dirs])) cleanup.removed.push(judged);
      else cleanup.failed.push(judged);
    }
    return cleanup;
  }

  /** Makes the cgroup `name` with `limits` in each hierarchy; throws (and removes it) when a write fails. */
  create(name: string, limits: ResourceLimits): ReplicaCgroup {
    const dirs = this.#ownerDirs().map((dir) => join(dir, name));
    const dirOf = (controller: Controller) => dirs[this.#bases.findIndex((b) => b.controllers.includes(controller))];
    try {
      for (const dir of dirs) mkdirSync(dir);
      const has = (controller: Controller, file: string) => existsSync(join(dirOf(controller), file));
      for (const write of limitWrites(this.version, limits, has)) {
        writeFileSync(join(dirOf(write.controller), write.file), write.value);
      }
    } catch (error) {
      for (const dir of dirs) {
        try {
          rmdirSync(dir);
        } catch {
          // Not made, or (outside cgroupfs) not empty.
        }
      }
      throw error;
    }
    const version = this.version;
    // Remembered once seen: the folder (and its count) is gone once the cgroup is removed.
    let killed = false;
    const oomKilled = () => (killed ||= oomKills(version, (file) => readOrUndefined(join(dirOf("memory"), file))) > 0);
    return {
      name,
      limits,
      procsFiles: dirs.map((dir) => join(dir, "cgroup.procs")),
      oomKilled,
      remove: () => {
        oomKilled();
        return removeCgroupDirs(dirs);
      },
    };
  }

  /** Removes this server's folders, with every replica's cgroup still in them. */
  async removeAll(): Promise<boolean> {
    const owners = this.#ownerDirs();
    return await removeCgroupDirs([...owners.flatMap(descendants), ...owners]);
  }
}
