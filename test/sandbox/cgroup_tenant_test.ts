/**
 * A jailed tenant cannot change its own cgroup: it finds no `/sys`, cannot mount a cgroup file system,
 * sees no host path in a cgroup namespace of its own, and the files of its cgroup (the server's) are not
 * writable by its uid in any case. The limits it was given hold.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { callFunction, deployApp } from "../_helpers/apps.ts";
import { cgroupsWork } from "../_helpers/cgroups.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

/** Tries, from inside the jail, each way to its cgroup's files; each is reported, none stops the next. */
const ESCAPE = `
import ctypes, os

def attempt(fn):
    try:
        return {"ok": True, "value": fn()}
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}

def write(path, value):
    with open(path, "w") as f:
        f.write(value)
    return "written"

def mount(fstype, options):
    os.makedirs("/tmp/cgroup", exist_ok=True)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"none", b"/tmp/cgroup", fstype.encode(), 0, options.encode()) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return "mounted"

def escape(files=()):
    return {
        "uid": os.getuid(),
        "sys": attempt(lambda: os.listdir("/sys")),
        "writes": {path: attempt(lambda path=path: write(path, str(os.getpid()) if path.endswith(".procs") else "-1")) for path in files},
        "mounts": {kind: attempt(lambda kind=kind, options=options: mount(kind, options)) for kind, options in (("cgroup", "memory"), ("cgroup2", ""))},
        "cgroup": open("/proc/self/cgroup").read(),
    }
`;

interface Attempt {
  ok: boolean;
  value?: unknown;
  error?: string;
}

interface Escape {
  uid: number;
  sys: Attempt;
  writes: Record<string, Attempt>;
  mounts: Record<string, Attempt>;
  cgroup: string;
}

const GIB = 1024 ** 3;

if ((await sandboxWorks("the cgroup tenant test")) && (await cgroupsWork("the cgroup tenant test"))) {
  describe("a jailed tenant and its own cgroup", () => {
    let t: TestServer;
    before(async () => {
      t = await startTestServer({ env: { RUNPLANE_SANDBOX: "required", RUNPLANE_CGROUPS: "required" } });
      await deployApp(t, "escape", {
        toml: "[scaling]\nmax_replicas = 1\n[hardware]\nmemory = 0.25\n",
        files: { "main.py": ESCAPE },
      });
    });
    after(() => t.close());

    it("cannot reach, mount or write its cgroup's files, and its memory limit holds", async () => {
      assert.equal((await callFunction(t, "escape", "escape")).response.status, 200);
      // The app's cgroups (the replica's, and its template's) in each hierarchy, as the host sees them.
      const namespace = /\[(\d+)\]/.exec(readlinkSync("/proc/self/ns/pid"))![1];
      const { parents, version } = t.server.context.cgroups;
      const apps = parents.flatMap((parent) =>
        readdirSync(parent).filter((name) => name.startsWith(`${namespace}-${process.pid}-`)).flatMap((server) =>
          readdirSync(join(parent, server)).filter((name) => name.includes(`${TEST_PROJECT}.escape`)).map((name) =>
            join(parent, server, name)
          )
        )
      );
      assert.ok(apps.length >= parents.length, `the app's cgroups: ${apps.join(", ")}`);
      const limitFile = version === "v2" ? "memory.max" : "memory.limit_in_bytes";
      const files = [
        ...apps.flatMap((dir) => [join(dir, limitFile), join(dir, "pids.max"), join(dir, "cgroup.procs")]),
        // Out of its cgroup, into the server's folder.
        ...[...new Set(apps.map((dir) => dirname(dir)))].map((dir) => join(dir, "cgroup.procs")),
      ].filter((file) => existsSync(file));
      const { response, data } = await callFunction(t, "escape", "escape", { files });
      assert.equal(response.status, 200);
      const seen = data!.result as Escape;

      assert.equal(seen.sys.ok, false, `the jail has no /sys: ${JSON.stringify(seen.sys)}`);
      for (const [file, attempt] of Object.entries(seen.writes)) {
        assert.equal(attempt.ok, false, `${file} was written from the jail`);
      }
      for (const [kind, attempt] of Object.entries(seen.mounts)) {
        assert.equal(attempt.ok, false, `a ${kind} file system was mounted in the jail`);
      }
      // A cgroup namespace of its own (rooted where its jail started: a forked replica's is its template's
      // cgroup): no host path shows.
      for (const hostPart of ["runplane", ...apps.map((dir) => basename(dirname(dir)))]) {
        assert.ok(!seen.cgroup.includes(hostPart), seen.cgroup);
      }
      // Had it reached them, the files are the server's and not writable by another uid.
      if (process.getuid?.() === 0) assert.notEqual(seen.uid, 0, "the tenant runs as a uid of its own");
      for (const file of files) {
        const stat = statSync(file);
        assert.equal(stat.uid, process.getuid?.(), `${file} is the server's`);
        assert.equal(stat.mode & 0o022, 0, `${file} is writable by others`);
      }
      for (const dir of apps.filter((dir) => existsSync(join(dir, limitFile)))) {
        assert.equal(readFileSync(join(dir, limitFile), "utf8").trim(), String(GIB / 4), `${dir}: the limit holds`);
      }
    });
  });
}
