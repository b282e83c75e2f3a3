/**
 * The cgroup move primer (`CgroupMovePrimer`): a prime moves this process into the cgroup it is already
 * in and nowhere else; it stops, without moving anything back, once the process was moved by someone
 * else; a folder it cannot write turns it off without a throw. What it saves is timing, measured by
 * `npm run bench -- --scenario cgroups`, not here. Needs cgroups (root): skipped loudly without them.
 */
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { cgroupLayout } from "../../server/sandbox/_cgroup_layout.ts";
import { CgroupMovePrimer } from "../../server/sandbox/_cgroup_move_primer.ts";
import { cgroupsWork } from "../_helpers/cgroups.ts";

const works = await cgroupsWork("the cgroup move primer");

/** This process's own folder in the v1 pids hierarchy, or in the unified one. */
function ownFolder(): { dir: string; version: "v1" | "v2" } {
  const layout = cgroupLayout({
    mountinfo: readFileSync("/proc/self/mountinfo", "utf8"),
    cgroup: readFileSync("/proc/self/cgroup", "utf8"),
  });
  if (layout.v1.pids) return { dir: layout.v1.pids, version: "v1" };
  return { dir: layout.v2!, version: "v2" };
}

const membership = () => readFileSync("/proc/self/cgroup", "utf8");

describe("the cgroup move primer", { skip: !works }, () => {
  it("moves this process into the cgroup it is in, and nowhere else", async () => {
    const { dir } = ownFolder();
    const before = membership();
    const primer = new CgroupMovePrimer(join(dir, "cgroup.procs"));
    try {
      const first = primer.prime();
      assert.equal(primer.prime(), first, "a prime in flight serves the next one");
      await first;
      await primer.prime();
      assert.ok(primer.active, "the primes were made");
      assert.equal(membership(), before);
      const listed = readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n");
      assert.ok(listed.includes(String(process.pid)));
    } finally {
      primer.close();
    }
  });

  it("stops once this process was moved elsewhere, and never moves it back", async (t) => {
    const { dir, version } = ownFolder();
    if (version !== "v1") return t.skip("moves a process between v1 folders; this host's server runs on v2");
    const primer = new CgroupMovePrimer(join(dir, "cgroup.procs"));
    const elsewhere = join(dir, `rp-primer-test-${process.pid}`);
    mkdirSync(elsewhere);
    try {
      writeFileSync(join(elsewhere, "cgroup.procs"), String(process.pid));
      const moved = membership();
      await primer.prime();
      assert.equal(membership(), moved, "still where it was moved");
      assert.equal(primer.active, false);
    } finally {
      writeFileSync(join(dir, "cgroup.procs"), String(process.pid));
      rmdirSync(elsewhere);
      primer.close();
    }
  });

  it("turns itself off when its folder cannot be written, without throwing", async () => {
    const primer = new CgroupMovePrimer("/nonexistent/cgroup.procs");
    await primer.prime();
    assert.equal(primer.active, false);
    primer.close();
  });
});
