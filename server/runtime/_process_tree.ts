/**
 * Finding a forked replica on the host and moving it into its own cgroup. A forked process reports its
 * pid as its pid namespace numbers it; the server finds the host's pid among the template's descendants
 * by the last entry of their `NSpid` (the same number unjailed).
 */
import { readdirSync, readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";

/** The pids `pid`'s threads started (`/proc/<pid>/task/<tid>/children`). */
function childrenOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((tid) =>
      readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number)
    );
  } catch {
    return [];
  }
}

/** `pid`'s pid in its innermost pid namespace. */
function innermostPid(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return Number((/^NSpid:\s*(.+)$/m.exec(status)?.[1] ?? String(pid)).trim().split(/\s+/).at(-1));
  } catch {
    return undefined;
  }
}

/** The host's pid of the descendant of `rootPid` that its own namespace calls `innerPid`; undefined if none. */
export function hostPidOf(rootPid: number, innerPid: number): number | undefined {
  const queue = [rootPid];
  for (let seen = 0; queue.length > 0 && seen < 10_000; seen++) {
    const pid = queue.shift()!;
    if (pid !== rootPid && innermostPid(pid) === innerPid) return pid;
    queue.push(...childrenOf(pid));
  }
  return undefined;
}

/**
 * Writes `pid` into each `cgroup.procs` file; resolves to what went wrong, or undefined. Off the event
 * loop: a move may wait for an RCU grace period (see `CgroupMovePrimer`), which would stall every call.
 */
export async function moveIntoCgroup(pid: number, procsFiles: string[]): Promise<string | undefined> {
  try {
    for (const file of procsFiles) await writeFile(file, String(pid));
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}
