/**
 * The cgroups module: where a server's cgroups are (v1 and v2 layouts, parsed from real-looking
 * `/proc/self` texts), the files and values a replica's limits are written as (v2 in a temporary folder,
 * where this machine cannot mount it; v1 in the real hierarchy), stale cgroups of gone servers, and what
 * a server says when it cannot write cgroups.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readlinkSync, rmdirSync, symlinkSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { after, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { cgroupLayout } from "../../server/sandbox/_cgroup_layout.ts";
import { CgroupTree, limitWrites, oomKills } from "../../server/sandbox/_cgroup_tree.ts";
import { judgeServerFolder } from "../../server/sandbox/_cgroups.ts";
import { CgroupsUnavailableError, createCgroups } from "../../server/sandbox/mod.ts";
import { alive, waitFor } from "../_helpers/apps.ts";
import { cgroupsWork } from "../_helpers/cgroups.ts";
import { testCgroupPlace } from "./_cgroup_place.ts";

const logger = createLogger({ level: "silent" });
const GIB = 1024 ** 3;

/** A hybrid host, like this one: v1 controllers, the unified hierarchy mounted without them. */
const HYBRID = {
  mountinfo: [
    "25 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw",
    "26 25 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755",
    "27 26 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate",
    "31 26 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpu,cpuacct",
    "32 26 0:29 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory",
    "33 26 0:30 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,pids",
  ].join("\n"),
  cgroup: "12:pids:/system.slice/runplane.service\n5:memory:/system.slice/runplane.service\n"
    + "3:cpu,cpuacct:/system.slice/runplane.service\n0::/system.slice/runplane.service\n",
};

/** A v2-only host, and a container that sees its own cgroup as the mount's root. */
const UNIFIED = {
  mountinfo: "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate",
  cgroup: "0::/system.slice/runplane.service\n",
};
const CONTAINER = {
  mountinfo: "700 690 0:30 /kubepods/pod1/c1 /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw",
  cgroup: "0::/kubepods/pod1/c1/app\n",
};

describe("where a server's cgroups are", () => {
  it("finds each v1 controller's folder on a hybrid host, and the unified one beside them", () => {
    assert.deepEqual(cgroupLayout(HYBRID), {
      v2: "/sys/fs/cgroup/unified/system.slice/runplane.service",
      v1: {
        memory: "/sys/fs/cgroup/memory/system.slice/runplane.service",
        cpu: "/sys/fs/cgroup/cpu,cpuacct/system.slice/runplane.service",
        pids: "/sys/fs/cgroup/pids/system.slice/runplane.service",
      },
    });
  });

  it("finds the unified hierarchy's folder, also below a mount whose root is not the hierarchy's", () => {
    assert.deepEqual(cgroupLayout(UNIFIED), { v2: "/sys/fs/cgroup/system.slice/runplane.service", v1: {} });
    assert.deepEqual(cgroupLayout(CONTAINER), { v2: "/sys/fs/cgroup/app", v1: {} });
  });
});

describe("the files a replica's limits are written to", () => {
  const everything = () => true;
  const limits = { cpu: 0.5, memoryBytes: 256 * 1024 ** 2, pids: 512 };

  it("v1: memory and memsw alike (no swap past it), the CFS quota over a 100 ms period, pids.max", () => {
    assert.deepEqual(limitWrites("v1", limits, everything), [
      { controller: "memory", file: "memory.limit_in_bytes", value: "268435456" },
      { controller: "memory", file: "memory.memsw.limit_in_bytes", value: "268435456" },
      { controller: "cpu", file: "cpu.cfs_period_us", value: "100000" },
      { controller: "cpu", file: "cpu.cfs_quota_us", value: "50000" },
      { controller: "pids", file: "pids.max", value: "512" },
    ]);
    const noSwapAccounting = limitWrites("v1", limits, (_, file) => !file.includes("memsw"));
    assert.deepEqual(noSwapAccounting[1], { controller: "memory", file: "memory.swappiness", value: "0" });
  });

  it("v2: memory.max, no swap, one OOM kill takes the group, cpu.max, pids.max", () => {
    assert.deepEqual(limitWrites("v2", { ...limits, cpu: 2 }, everything), [
      { controller: "memory", file: "memory.max", value: "268435456" },
      { controller: "memory", file: "memory.swap.max", value: "0" },
      { controller: "memory", file: "memory.oom.group", value: "1" },
      { controller: "cpu", file: "cpu.max", value: "200000 100000" },
      { controller: "pids", file: "pids.max", value: "512" },
    ]);
  });

  it("reads OOM kills from v1's oom_control (or failcnt on old kernels) and v2's memory.events", () => {
    const v1 = { "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "memory.failcnt": "7\n" };
    assert.equal(oomKills("v1", (file) => v1[file as keyof typeof v1]), 1);
    assert.equal(oomKills("v1", (file) => file === "memory.oom_control" ? "oom_kill_disable 0\noom_kill 0\n" : "7"), 0);
    assert.equal(
      oomKills("v1", (file) => file === "memory.oom_control" ? "oom_kill_disable 0\nunder_oom 0\n" : "3\n"),
      3,
    );
    assert.equal(oomKills("v1", () => undefined), 0);
    const events = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
    assert.equal(oomKills("v2", () => events), 1);
    assert.equal(oomKills("v2", () => "low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n"), 0);
  });

  it("v2 in a folder: enables the controllers at each level and writes the replica's limits there", async () => {
    const fresh = await mkdtemp(join(tmpdir(), "runplane-cgroup-v2-"));
    try {
      const tree = new CgroupTree("v2", [{ dir: fresh, controllers: ["memory", "cpu", "pids"] }], "42-99-rp_x");
      tree.prepare();
      for (const dir of [fresh, join(fresh, "runplane"), join(fresh, "runplane", "42-99-rp_x")]) {
        assert.equal(readFileSync(join(dir, "cgroup.subtree_control"), "utf8"), "+memory +cpu +pids");
      }
      const cgroup = tree.create("7-p.app", { cpu: 1.5, memoryBytes: 2 * GIB, pids: 100 });
      const dir = join(fresh, "runplane", "42-99-rp_x", "7-p.app");
      assert.deepEqual(cgroup.procsFiles, [join(dir, "cgroup.procs")]);
      assert.equal(readFileSync(join(dir, "memory.max"), "utf8"), String(2 * GIB));
      assert.equal(readFileSync(join(dir, "cpu.max"), "utf8"), "150000 100000");
      assert.equal(readFileSync(join(dir, "pids.max"), "utf8"), "100");
      // Without the optional files (a folder, not a cgroup) they are not made up.
      assert.equal(existsSync(join(dir, "memory.swap.max")), false);
      writeFileSync(join(dir, "memory.events"), "oom 1\noom_kill 1\n");
      assert.equal(cgroup.oomKilled(), true);
    } finally {
      await rm(fresh, { recursive: true, force: true });
    }
  });
});

/** This process's pid namespace (its inode) and start time, as a server names its folder with them. */
const NAMESPACE = /\[(\d+)\]/.exec(readlinkSync("/proc/self/ns/pid"))![1];
const STARTED = readFileSync("/proc/self/stat", "utf8").split(")").at(-1)!.trim().split(/\s+/)[19];
/** A pid past every `pid_max` (2^22): no process has it. */
const NO_PID = 4194305;

describe("whose folder a starting server judges gone", () => {
  it("a folder whose process no longer exists, or whose pid is another process's now", () => {
    assert.deepEqual(judgeServerFolder(`${NAMESPACE}-${NO_PID}-1-rp_dead`), {
      state: "gone",
      why: `no process ${NO_PID}`,
    });
    const reused = judgeServerFolder(`${NAMESPACE}-${process.pid}-${Number(STARTED) - 1}-rp_old`);
    assert.equal(reused.state, "gone");
    assert.match(reused.why, new RegExp(`process ${process.pid} is another one now \\(started at ${STARTED}\\)`));
  });

  it("not a running server's, another pid namespace's, or a name of another form", () => {
    assert.equal(judgeServerFolder(`${NAMESPACE}-${process.pid}-${STARTED}-rp_live`).state, "running");
    const foreign = judgeServerFolder(`1-${NO_PID}-1-rp_elsewhere`);
    assert.deepEqual([foreign.state, /another pid namespace/.test(foreign.why)], ["unknown", true]);
    for (
      const name of [
        "probe",
        `${NAMESPACE}-${NO_PID}-rp_short`,
        `${NAMESPACE}-${NO_PID}-1-`,
        `x${NAMESPACE}-${NO_PID}-1-rp`,
      ]
    ) {
      assert.equal(judgeServerFolder(name).state, "unknown", name);
    }
  });

  it("not when /proc proves nothing: an entry it cannot read, a process it hides, another namespace's /proc", async () => {
    const proc = await mkdtemp(join(tmpdir(), "runplane-fake-proc-"));
    const otherProc = await mkdtemp(join(tmpdir(), "runplane-fake-proc-"));
    try {
      // A /proc of this process's namespace, but for what each case puts in it.
      mkdirSync(join(proc, String(process.pid), "ns"), { recursive: true });
      symlinkSync(`pid:[${NAMESPACE}]`, join(proc, String(process.pid), "ns", "pid"));
      symlinkSync(String(process.pid), join(proc, "self"));
      // A read that fails otherwise than ENOENT (here EISDIR; EMFILE, EACCES alike): nothing is proved.
      mkdirSync(join(proc, String(NO_PID), "stat"), { recursive: true });
      const unreadable = judgeServerFolder(`${NAMESPACE}-${NO_PID}-1-rp_x`, { procDir: proc });
      assert.deepEqual([unreadable.state, /could not be read \(EISDIR\)/.test(unreadable.why)], ["unknown", true]);
      // No entry for a process that exists (hidepid hides other users' processes): a signal finds it.
      const hidden = judgeServerFolder(`${NAMESPACE}-${process.pid}-${STARTED}-rp_x`, { procDir: proc });
      assert.deepEqual([hidden.state, /is missing, but process \d+ exists/.test(hidden.why)], ["unknown", true]);
      // A /proc whose `self` is not this process: another namespace's, where the same pids are others.
      symlinkSync("1", join(otherProc, "self"));
      mkdirSync(join(otherProc, "1", "ns"), { recursive: true });
      symlinkSync(`pid:[${NAMESPACE}]`, join(otherProc, "1", "ns", "pid"));
      assert.equal(judgeServerFolder(`${NAMESPACE}-${NO_PID}-1-rp_dead`, { procDir: otherProc }).state, "unknown");
    } finally {
      await rm(proc, { recursive: true, force: true });
      await rm(otherProc, { recursive: true, force: true });
    }
  });
});

describe("a server that cannot write cgroups", () => {
  it("auto: serves without limits and says why; required: refuses to start", async () => {
    const layout = { v1: { memory: "/proc/runplane-nope", cpu: "/proc/runplane-nope", pids: "/proc/runplane-nope" } };
    const auto = await createCgroups("auto", { logger, owner: "rp_t", pids: 512, layout });
    assert.equal(auto.status.version, null);
    assert.match(
      auto.status.problems.join(" "),
      /cgroups cannot be written here .*WITHOUT memory, CPU and process limits/,
    );
    assert.equal(auto.create("p/a", { cpu: 1, memoryBytes: GIB }), null);
    await assert.rejects(
      createCgroups("required", { logger, owner: "rp_t", pids: 512, layout }),
      (error: Error) =>
        error instanceof CgroupsUnavailableError && /RUNPLANE_CGROUPS=required, but/.test(error.message),
    );
    const none = await createCgroups("auto", { logger, owner: "rp_t", pids: 512, layout: { v1: {} } });
    assert.match(none.status.problems[0], /no cgroup hierarchy with memory, cpu, pids is mounted/);
  });

  it("does not take a folder that is not a cgroup for one", async () => {
    const dir = await mkdtemp(join(tmpdir(), "runplane-not-a-cgroup-"));
    try {
      const layout = { v1: { memory: dir, cpu: dir, pids: dir } };
      const cgroups = await createCgroups("auto", { logger, owner: "rp_t", pids: 512, layout });
      assert.equal(cgroups.status.version, null);
      assert.match(cgroups.status.problems[0], /is not on a cgroup v1 file system/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

if (await cgroupsWork("the cgroup cleanup tests")) {
  describe("the cgroups of a server that is gone", () => {
    const cleanups: Array<() => Promise<void>> = [];
    const place = testCgroupPlace();
    const { layout } = place;
    after(async () => {
      for (const cleanup of cleanups) await cleanup();
      await place.remove();
    });

    it("are removed, with their processes, by the next server to start, which names whose they were", async () => {
      const first = await createCgroups("required", { logger, owner: "rp_first", pids: 64, layout });
      cleanups.push(() => first.close());
      // A server killed with its replica still running: a folder named for a process of this pid namespace
      // that no longer exists, holding a live process; one killed while it made its folders (in the first
      // hierarchy only); one of another pid namespace (a container sharing the hierarchy), whose pid means
      // nothing here; and a folder whose name is not a server's.
      const { parents } = first.status;
      const dead = `${NAMESPACE}-${NO_PID}-1-rp_dead`;
      const half = `${NAMESPACE}-${NO_PID}-2-rp_half`;
      const stale = parents.map((p) => join(p, dead, "1-p.app"));
      const kept = [...parents.map((p) => join(p, "1-4194305-1-rp_elsewhere")), ...parents.map((p) => join(p, "tmp"))];
      for (const dir of [...kept, ...stale, join(parents[0], half)]) mkdirSync(dir, { recursive: true });
      cleanups.push(async () => {
        for (const dir of kept) rmdirSync(dir);
      });
      const sleeper = spawn("/bin/sh", [
        "-c",
        `for f in ${stale.map((d) => join(d, "cgroup.procs")).join(" ")}; do echo $$ > $f; done; exec sleep 60`,
      ], { stdio: "ignore" });
      await waitFor(
        () => readFileSync(join(stale[0], "cgroup.procs"), "utf8").trim() === String(sleeper.pid),
        "the stale process to join",
      );
      const logs: Array<Record<string, unknown>> = [];
      const capture = createLogger({
        level: "debug",
        destination: new Writable({
          write(chunk, _encoding, done) {
            logs.push(JSON.parse(String(chunk)) as Record<string, unknown>);
            done();
          },
        }),
      });
      const second = await createCgroups("required", { logger: capture, owner: "rp_second", pids: 64, layout });
      cleanups.push(() => second.close());
      await waitFor(() => !alive(sleeper.pid!), "the stale replica's process to be killed");
      for (const dir of [...stale, ...parents.flatMap((p) => [join(p, dead), join(p, half)])]) {
        assert.equal(existsSync(dir), false, `${dir} was removed`);
      }
      assert.ok(kept.every((dir) => existsSync(dir)), "another pid namespace's folder, and one not a server's, stay");
      const firstFolder = `${NAMESPACE}-${process.pid}-${STARTED}-rp_first`;
      assert.ok(parents.every((p) => existsSync(join(p, firstFolder))), "the running server's folders stay");
      // Each gone server named once, whichever hierarchies held its folder. (Where the servers' own place is
      // used, on v2, other servers' folders may be there too: only this test's are looked at.)
      const ours = (folder: unknown) => [dead, half, "1-4194305-1-rp_elsewhere", "tmp"].includes(String(folder));
      const removed = logs.find((l) => l.msg === "removed the cgroups of servers that are gone");
      assert.ok(
        Array.isArray(removed?.servers),
        `the log names whose cgroups were removed: ${JSON.stringify(removed)}`,
      );
      const servers = (removed.servers as Array<Record<string, unknown>>).filter((s) => ours(s.folder));
      assert.deepEqual(
        servers.map((s) => [s.folder, s.pid, s.start_time, s.owner]).sort(),
        [[dead, NO_PID, "1", "rp_dead"], [half, NO_PID, "2", "rp_half"]],
        JSON.stringify(logs),
      );
      const left = logs.find((l) => l.msg === "left cgroups of other servers that are not proved gone");
      assert.deepEqual(
        (left?.folders as Array<{ folder: string }> | undefined)?.map((f) => f.folder).filter(ours).sort(),
        ["1-4194305-1-rp_elsewhere", "tmp"],
      );
      assert.equal(second.status.version, first.status.version);
    });

    it("removes a server's own cgroups, and what runs in them, when it closes", async () => {
      const cgroups = await createCgroups("required", { logger, owner: "rp_closing", pids: 64 });
      const cgroup = cgroups.create("p/app", { cpu: 0.5, memoryBytes: GIB })!;
      const child = spawn("/bin/sh", [
        "-c",
        `for f in ${cgroup.procsFiles.join(" ")}; do echo $$ > $f; done; exec sleep 60`,
      ], { stdio: "ignore" });
      await waitFor(
        () => readFileSync(cgroup.procsFiles[0], "utf8").trim() === String(child.pid),
        "the process to join",
      );
      await cgroups.close();
      await waitFor(() => !alive(child.pid!), "the process to be killed");
      assert.ok(cgroup.procsFiles.every((file) => !existsSync(file)));
    });
  });
}
