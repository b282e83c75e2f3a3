/** Processes as /proc shows them: a server's descendants (replicas, sandboxes, workers), and whether one still runs. */
import { readdir, readFile } from "node:fs/promises";

/** A process as `/proc` knows it: its pid and its start time, so that a reused pid is not taken for it. */
export interface ProcessRef {
  pid: number;
  parent: number;
  startTime: string;
}

/** The fields of `/proc/<pid>/stat` after the command's name (state, ppid, …), or null once it is gone. */
async function statFields(pid: number): Promise<string[] | null> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
  return stat === "" ? null : stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/**
 * Every process below `root` now (its children, theirs, …): the replicas' sandboxes and what runs in them,
 * which a jail starts with an environment of its own (no marker variable reaches them).
 */
export async function descendants(root: number): Promise<ProcessRef[]> {
  const all: ProcessRef[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const fields = await statFields(Number(entry));
    // Field 4 of stat is the parent's pid, field 22 the start time (here at 1 and 19).
    if (fields) all.push({ pid: Number(entry), parent: Number(fields[1]), startTime: fields[19] });
  }
  const found: ProcessRef[] = [];
  const below = new Set([root]);
  for (let grew = true; grew;) {
    grew = false;
    for (const p of all) {
      if (below.has(p.parent) && !below.has(p.pid)) {
        below.add(p.pid);
        found.push(p);
        grew = true;
      }
    }
  }
  return found;
}

/** Whether the process `ref` names (the same one: same start time) still runs and is not a zombie. */
export async function stillRunning(ref: ProcessRef): Promise<boolean> {
  const fields = await statFields(ref.pid);
  return fields !== null && fields[19] === ref.startTime && fields[0] !== "Z";
}

/** The children of `parent` that run this Node: a host's workers, under their supervisor. */
export async function nodeChildren(parent: number): Promise<number[]> {
  const children = (await descendants(parent)).filter((p) => p.parent === parent);
  const node = await Promise.all(children.map(async (p) => {
    const command = await readFile(`/proc/${p.pid}/cmdline`, "utf8").catch(() => "");
    return command.split("\0")[0] === process.execPath ? [p.pid] : [];
  }));
  return node.flat();
}
