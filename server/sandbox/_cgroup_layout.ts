/**
 * Where this process's cgroups are: read from `/proc/self/mountinfo` (which hierarchies are mounted where,
 * with which controllers) and `/proc/self/cgroup` (this process's path in each). Pure: the texts are
 * passed in, so both layouts are tested on any machine.
 */
import { isAbsolute, join, relative } from "node:path";

/** The controllers a replica's limits need. */
export const CONTROLLERS = ["memory", "cpu", "pids"] as const;

/** One of `CONTROLLERS`. */
export type Controller = (typeof CONTROLLERS)[number];

/** One cgroup mount: where it is, what it holds, and the hierarchy path at its root. */
interface CgroupMount {
  version: "v1" | "v2";
  mountPoint: string;
  root: string;
  /** v1: the controllers bound to the hierarchy (`cpu`, `cpuacct`, …); v2: none (they are listed in its files). */
  controllers: string[];
}

/** The server's own cgroup folder in each hierarchy it could use. */
export interface CgroupLayout {
  /** The unified hierarchy's folder of this process, when one is mounted. */
  v2?: string;
  /** Per controller, the v1 hierarchy's folder of this process, for those mounted as v1. */
  v1: Partial<Record<Controller, string>>;
}

/** Undoes mountinfo's octal escapes (`\040` for a space). */
function unescape(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/** The cgroup mounts listed in a `/proc/<pid>/mountinfo` text. */
function cgroupMounts(mountinfo: string): CgroupMount[] {
  const mounts: CgroupMount[] = [];
  for (const line of mountinfo.split("\n")) {
    const [left, right] = line.split(" - ");
    if (!right) continue;
    const fields = left.split(" ");
    const [fsType, , superOptions = ""] = right.split(" ");
    if (fsType !== "cgroup" && fsType !== "cgroup2") continue;
    mounts.push({
      version: fsType === "cgroup2" ? "v2" : "v1",
      root: unescape(fields[3]),
      mountPoint: unescape(fields[4]),
      controllers: fsType === "cgroup" ? superOptions.split(",") : [],
    });
  }
  return mounts;
}

/** The folder of hierarchy path `path` under `mount`, or undefined when the mount does not show it. */
function folderOf(mount: CgroupMount, path: string): string | undefined {
  const rel = relative(mount.root, path);
  if (rel.startsWith("..") || isAbsolute(rel)) return undefined;
  return join(mount.mountPoint, rel);
}

/**
 * This process's cgroup folders, from its `mountinfo` and `cgroup` texts (`/proc/self/…`). A hierarchy
 * mounted more than once is taken where it is first listed.
 */
export function cgroupLayout(texts: { mountinfo: string; cgroup: string }): CgroupLayout {
  const mounts = cgroupMounts(texts.mountinfo);
  const layout: CgroupLayout = { v1: {} };
  for (const line of texts.cgroup.split("\n")) {
    const match = /^(\d+):([^:]*):(.*)$/.exec(line.trim());
    if (!match) continue;
    const [, id, list, path] = match;
    if (id === "0" && list === "") {
      for (const mount of mounts.filter((m) => m.version === "v2")) {
        layout.v2 ??= folderOf(mount, path);
      }
      continue;
    }
    const controllers = list.split(",");
    for (const controller of CONTROLLERS.filter((c) => controllers.includes(c))) {
      const mount = mounts.find((m) => m.version === "v1" && m.controllers.includes(controller));
      const folder = mount && folderOf(mount, path);
      if (folder) layout.v1[controller] ??= folder;
    }
  }
  return layout;
}
