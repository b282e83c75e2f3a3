/**
 * A cgroup of a test's own below this process's, in each v1 hierarchy, for servers to make their
 * `runplane/` in: the servers of other tests and other people on the host (which remove gone servers'
 * cgroups from their own `runplane/`) never see what a test makes or leaves there, nor it theirs.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type CgroupLayout, cgroupLayout } from "../../server/sandbox/_cgroup_layout.ts";
import { removeCgroupDirs } from "../../server/sandbox/_cgroup_tree.ts";

/** A test's own cgroup (see the module's comment). */
export interface TestCgroupPlace {
  /**
   * The layout to pass `createCgroups`; undefined on v2, where a cgroup holding processes (this one's)
   * gives its children no controllers: there the servers' own place is used.
   */
  layout?: CgroupLayout;
  /**
   * Runs `start` with this process in the place, so that the processes it spawns (a server) start there:
   * a child is born in its parent's cgroups. Nothing else may be started meanwhile.
   */
  startInside<T>(start: () => Promise<T>): Promise<T>;
  /** Kills what is left in the place and removes it, cgroups below it included. */
  remove(): Promise<void>;
}

/** Every folder below `dir`, deepest first. */
function descendants(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory()).flatMap((e) => [
    ...descendants(join(dir, e.name)),
    join(dir, e.name),
  ]);
}

/** Makes the place; remove it in `after`. */
export function testCgroupPlace(): TestCgroupPlace {
  const own = cgroupLayout({
    mountinfo: readFileSync("/proc/self/mountinfo", "utf8"),
    cgroup: readFileSync("/proc/self/cgroup", "utf8"),
  });
  const unified = own.v2 !== undefined && existsSync(join(own.v2, "cgroup.controllers"))
    && readFileSync(join(own.v2, "cgroup.controllers"), "utf8").includes("memory");
  const name = `runplane-test-${process.pid}-${Date.now()}`;
  const homes = [...new Set(Object.values(own.v1))];
  const dirs = unified ? [] : homes.map((dir) => join(dir, name));
  for (const dir of dirs) mkdirSync(dir, { recursive: true });
  const moveTo = (folders: string[]) => {
    for (const dir of folders) writeFileSync(join(dir, "cgroup.procs"), String(process.pid));
  };
  return {
    layout: unified
      ? undefined
      : { v1: Object.fromEntries(Object.entries(own.v1).map(([controller, dir]) => [controller, join(dir, name)])) },
    async startInside(start) {
      if (unified) return await start();
      moveTo(dirs);
      try {
        return await start();
      } finally {
        moveTo(homes);
      }
    },
    async remove() {
      if (!(await removeCgroupDirs([...dirs.flatMap(descendants), ...dirs]))) {
        throw new Error(`processes outlived the removal of ${dirs.join(", ")}`);
      }
    },
  };
}
