/**
 * Project volumes in replicas (issue 48, part 2): real jailed replicas (bubblewrap, root, loop-mounted ext4
 * volumes) read and write their project's volume, see each other's writes, a second app mounts it
 * read-only (EROFS), another project's app sees nothing of it and cannot name it, a write past the size is
 * ENOSPC inside the replica while the image on the host's disk stays bounded, and a `[runtime] preload`
 * module reads the weights in the template. Skips loudly without root, a jail or loop mounts.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { callFunction, deployApp } from "../_helpers/apps.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { engines } from "../_helpers/postgres.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { unmountUnder, volumePaths } from "../../server/volumes/mod.ts";

const REQUIRED = process.env.RUNPLANE_TEST_REQUIRE_SANDBOX === "1";
const OTHER_PROJECT = "p-other";

/** Whether this machine loop-mounts an ext4 image as root; else a loud skip (a failure under CI's flag). */
function loopMountsWork(what: string): boolean {
  let problem = process.getuid?.() === 0 ? "" : "loop mounts need root";
  if (!problem) {
    try {
      execFileSync("mkfs.ext4", ["-V"], { stdio: "ignore" });
      execFileSync("losetup", ["-f"], { stdio: "ignore" });
    } catch (error) {
      problem = `mkfs.ext4 or a free loop device is missing (${(error as Error).message.split("\n")[0]})`;
    }
  }
  if (!problem) return true;
  if (REQUIRED) throw new Error(`${what}: ${problem}, and RUNPLANE_TEST_REQUIRE_SANDBOX=1 requires it`);
  console.error(`\n*** SKIPPED ${what}: ${problem}.\n*** Run as root with e2fsprogs and loop devices.\n`);
  return false;
}

const VOLUME_APP = `
import errno, os

ROOT = "/models"

def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()

def write(path, text):
    with open(os.path.join(ROOT, path), "w") as f:
        f.write(text)
    return os.getpid()

def meet(tag, wait_s=120):
    """Writes tag-<pid> and waits for another replica's file: two of these calls run on two replicas."""
    import time
    mine = f"{tag}-{os.getpid()}"
    # Written whole under another name, then renamed: the other replica never reads a file half made.
    with open(os.path.join(ROOT, f".{mine}"), "w") as f:
        f.write(mine)
    os.rename(os.path.join(ROOT, f".{mine}"), os.path.join(ROOT, mine))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        others = [n for n in os.listdir(ROOT) if n.startswith(tag + "-") and n != mine]
        if others:
            with open(os.path.join(ROOT, others[0])) as f:
                return {"mine": mine, "seen": f.read()}
        time.sleep(0.05)
    return {"mine": mine, "seen": None}

def fill(path, mib):
    """Writes up to mib MiB; the errno name that stopped it, or None."""
    chunk = b"x" * (1 << 20)
    try:
        with open(os.path.join(ROOT, path), "wb") as f:
            for _ in range(mib):
                f.write(chunk)
                f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        return errno.errorcode.get(error.errno)
    return None

def remove(path):
    os.remove(os.path.join(ROOT, path))

def mounts():
    with open("/proc/self/mountinfo") as f:
        return [line.split(" ")[4] + " " + line.split(" - ")[0].split(" ")[5] for line in f]
`;

const READER_APP = `
import errno, os

def read(path):
    with open(os.path.join("/data", path)) as f:
        return f.read()

def write(path):
    try:
        with open(os.path.join("/data", path), "w") as f:
            f.write("no")
    except OSError as error:
        return errno.errorcode.get(error.errno)
    return None
`;

const PRELOAD = `
import json, os
LOADED_BY = os.getpid()
with open("/models/weights.json") as f:
    WEIGHTS = json.load(f)
`;

const PRELOAD_MAIN = `
import os
import weights_loader

def predict(x):
    w = weights_loader.WEIGHTS
    return {"y": w["a"] * x + w["b"], "loaded_by": weights_loader.LOADED_BY, "pid": os.getpid()}
`;

const NOSY_APP = `
def mounts():
    with open("/proc/self/mountinfo") as f:
        return f.read()

def listing(path):
    import os
    try:
        return os.listdir(path)
    except OSError as error:
        return str(error)
`;

for (const engine of await engines()) {
  describe(`project volumes in replicas (loop mode, jailed, ${engine})`, async () => {
    const works = (await sandboxWorks("volumes in replicas")) && loopMountsWork("volumes in replicas");
    let t: TestServer;
    let deploy: string;
    let volumesDir: string;
    let dataDir: string;

    before(async () => {
      if (!works) return;
      // A data dir of the test's own: its volumes are unmounted before it is removed.
      dataDir = await mkdtemp(join(tmpdir(), "runplane-volumes-"));
      volumesDir = join(dataDir, "volumes");
      t = await startTestServer({ engine, dataDir, env: { RUNPLANE_VOLUMES_MODE: "loop" } });
      deploy = (await t.mintToken({ scopes: ["deploy", "rest"] })).token;
      for (const [name, size] of [["weights", 0.25], ["small", 0.0625]] as const) {
        const made = await request("PUT", `/v3/projects/${TEST_PROJECT}/volumes/${name}`, { size_gb: size });
        assert.equal(made.status, 201, await made.clone().text());
      }
    });
    after(async () => {
      await t?.close();
      // What this test mounted: every volume under its data dir.
      if (volumesDir) await unmountUnder(volumesDir);
      if (dataDir) await rm(dataDir, { recursive: true, force: true });
    });

    function request(method: string, path: string, json?: unknown): Promise<Response> {
      return checkedFetch(`${t.url}${path}`, {
        method,
        headers: { Authorization: `Bearer ${deploy}`, ...(json ? { "Content-Type": "application/json" } : {}) },
        body: json ? JSON.stringify(json) : undefined,
      });
    }

    function filesOf(volume: string, projectId = TEST_PROJECT): string {
      return volumePaths(volumesDir, { projectId, name: volume }).files;
    }

    async function call(app: string, fn: string, body: Record<string, unknown> = {}) {
      const answer = await callFunction(t, app, fn, body);
      assert.equal(answer.error, undefined, JSON.stringify(answer.error));
      return answer.data!.result as unknown;
    }

    it(
      "a replica reads what was put in its volume and writes to it, as its project's uid",
      { skip: !works },
      async () => {
        writeFileSync(join(filesOf("weights"), "hello.txt"), "from the host");
        await deployApp(t, "vol-rw", {
          toml: '[volumes]\nweights = "/models"\n[scaling]\nmax_replicas = 2\nmin_replicas = 0\n',
          files: { "main.py": VOLUME_APP },
        });
        assert.equal(await call("vol-rw", "read", { path: "hello.txt" }), "from the host");
        await call("vol-rw", "write", { path: "out.txt", text: "from the replica" });
        const written = join(filesOf("weights"), "out.txt");
        assert.equal(readFileSync(written, "utf8"), "from the replica");
        assert.notEqual(statSync(written).uid, 0, "written as the project's uid, not root");
        // Shown nosuid, nodev, at /models alone.
        const mounts = await call("vol-rw", "mounts") as string[];
        const shown = mounts.filter((line) => line.startsWith("/models "));
        assert.equal(shown.length, 1, mounts.join("\n"));
        assert.match(shown[0]!, /nosuid/);
        assert.match(shown[0]!, /nodev/);
      },
    );

    it("two replicas of the app see each other's writes", { skip: !works }, async () => {
      const [a, b] = await Promise.all([
        call("vol-rw", "meet", { tag: "meet" }),
        call("vol-rw", "meet", { tag: "meet" }),
      ]) as Array<{ mine: string; seen: string }>;
      assert.equal(a.seen, b.mine);
      assert.equal(b.seen, a.mine);
    });

    it(
      "a second app of the project mounts it read-only: it reads, and its write is EROFS",
      { skip: !works },
      async () => {
        writeFileSync(join(filesOf("weights"), "shared.txt"), "shared");
        await deployApp(t, "vol-ro", {
          toml: '[volumes]\nro = { volume = "weights", path = "/data", read_only = true }\n',
          files: { "main.py": READER_APP },
        });
        assert.equal(await call("vol-ro", "read", { path: "shared.txt" }), "shared");
        assert.equal(await call("vol-ro", "write", { path: "nope.txt" }), "EROFS");
      },
    );

    it("another project's app sees nothing of it, and naming it does not start", { skip: !works }, async () => {
      await deployApp(t, "nosy", { project: OTHER_PROJECT, toml: "", files: { "main.py": NOSY_APP } });
      const other = await t.mintToken({ projectId: OTHER_PROJECT, scopes: ["run"] });
      const run = (fn: string, body: unknown, app = "nosy") =>
        fetch(`${t.url}/v4/${OTHER_PROJECT}/${app}/${fn}`, {
          method: "POST",
          headers: { Authorization: `Bearer ${other.token}`, "Content-Type": "application/json" },
          body: JSON.stringify(body),
        });
      const mounts = (await (await run("mounts", {})).json()).result as string;
      assert.doesNotMatch(mounts, /volumes\/| \/models /);
      assert.match(String((await (await run("listing", { path: volumesDir })).json()).result), /No such file/);
      await deployApp(t, "thief", {
        project: OTHER_PROJECT,
        toml: '[volumes]\nweights = "/models"\n',
        files: { "main.py": NOSY_APP },
      });
      const refused = await run("listing", { path: "/models" }, "thief");
      assert.equal(refused.status, 503);
      const problem = await refused.json() as { detail: string };
      assert.match(problem.detail, /volume "weights" of project p-other/);
    });

    it(
      "a write past the size is ENOSPC inside the replica; the image on the host's disk stays bounded",
      { skip: !works },
      async () => {
        await deployApp(t, "vol-full", { toml: '[volumes]\nsmall = "/models"\n', files: { "main.py": VOLUME_APP } });
        assert.equal(await call("vol-full", "fill", { path: "big.bin", mib: 200 }), "ENOSPC");
        const { image } = volumePaths(volumesDir, { projectId: TEST_PROJECT, name: "small" });
        const allocated = statSync(image).blocks * 512;
        assert.ok(allocated <= 64 * 1024 * 1024, `the image holds ${allocated} bytes of the host's disk`);
        await call("vol-full", "remove", { path: "big.bin" });
      },
    );

    it(
      "a [runtime] preload module reads the weights in the template, before the replica forks",
      { skip: !works },
      async () => {
        writeFileSync(join(filesOf("weights"), "weights.json"), JSON.stringify({ a: 2, b: 1 }));
        await deployApp(t, "vol-preload", {
          toml: '[volumes]\nweights = "/models"\n[runtime]\npreload = ["weights_loader"]\n',
          files: { "main.py": PRELOAD_MAIN, "weights_loader.py": PRELOAD },
        });
        const answer = await call("vol-preload", "predict", { x: 3 }) as { y: number; loaded_by: number; pid: number };
        assert.equal(answer.y, 7);
        assert.notEqual(answer.loaded_by, answer.pid, "loaded by the template, not by the forked replica");
      },
    );

    it("[build] volumes: off, a build command does not see the volume; on, it does", { skip: !works }, async () => {
      writeFileSync(join(filesOf("weights"), "hello.txt"), "from the host");
      const shell = 'shell_commands = ["cat /models/hello.txt || echo unseen"]';
      const off = await deployBundle(
        t,
        "build-off",
        await bundleOf({
          "main.py": "def f():\n    return 1\n",
          "runplane.toml": `[volumes]\nweights = "/models"\n[build]\n${shell}\n`,
        }),
        deploy,
      );
      assert.equal(off.status, "ready", off.error ?? "");
      assert.ok(off.lines.some((line) => line.includes("unseen")), off.lines.join("\n"));
      assert.ok(!off.lines.some((line) => line.includes("from the host")), off.lines.join("\n"));
      const on = await deployBundle(
        t,
        "build-on",
        await bundleOf({
          "main.py": "def f():\n    return 1\n",
          "runplane.toml": `[volumes]\nweights = "/models"\n[build]\nvolumes = true\n${shell}\n`,
        }),
        deploy,
      );
      assert.equal(on.status, "ready", on.error ?? "");
      assert.ok(on.lines.some((line) => line.includes("from the host")), on.lines.join("\n"));
    });

    it(
      "a deployment naming a volume its project does not have fails its build, naming it",
      { skip: !works },
      async () => {
        const other = await t.mintToken({ projectId: OTHER_PROJECT, scopes: ["deploy", "rest"] });
        const failed = await deployBundle(
          t,
          "burglar",
          await bundleOf({
            "main.py": "def f():\n    return 1\n",
            "runplane.toml": '[volumes]\nweights = "/models"\n',
          }),
          other.token,
          { project: OTHER_PROJECT },
        );
        assert.equal(failed.status, "failed");
        assert.match(
          failed.error ?? "",
          /volumes\.weights names volume "weights", which project p-other does not have/,
        );
      },
    );

    it(
      "DELETE of a volume a deployment in service mounts is 409 naming the app; unmounted, it goes",
      { skip: !works },
      async () => {
        const refused = await request("DELETE", `/v3/projects/${TEST_PROJECT}/volumes/weights`);
        assert.equal(refused.status, 409);
        assert.match((await refused.json() as { detail: string }).detail, /app build-(off|on)/);
        const made = await request("PUT", `/v3/projects/${TEST_PROJECT}/volumes/spare`, { size_gb: 0.0625 });
        assert.equal(made.status, 201);
        assert.equal((await request("DELETE", `/v3/projects/${TEST_PROJECT}/volumes/spare`)).status, 204);
      },
    );

    it(
      "the example predict app loads its weights from the volume in its template and predicts",
      { skip: !works },
      async () => {
        const example = new URL("../../examples/apps/p-demo/predict/", import.meta.url);
        const file = async (name: string) => await readFile(new URL(name, example), "utf8");
        const put = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/volumes/weights/files/linear.json`, {
          method: "PUT",
          headers: { Authorization: `Bearer ${deploy}`, "Content-Type": "application/octet-stream" },
          body: await file("linear.json"),
        });
        assert.ok(put.status === 200 || put.status === 201, await put.clone().text());
        await deployApp(t, "predict", {
          toml: await file("runplane.toml"),
          files: { "main.py": await file("main.py"), "model.py": await file("model.py") },
        });
        const features = { rooms: 3, area_m2: 70, age_years: 12 };
        assert.deepEqual(await call("predict", "predict", { features }), { prediction: 204.9 });
        assert.deepEqual(await call("predict", "predict", { features: [3, 70, 12] }), { prediction: 204.9 });
        assert.deepEqual(await call("predict", "info"), {
          features: ["rooms", "area_m2", "age_years"],
          weights_file: "/models/linear.json",
          preloaded: true,
        });
      },
    );
  });
}
