/**
 * GPUs given to replicas (RUNPLANE_GPUS, a fake inventory: this machine may have none): real servers,
 * real worker processes, every response checked against the contract. A real CUDA call runs only where
 * nvidia-smi answers (skipped loudly elsewhere).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { bundleOf } from "../_helpers/deployments.ts";
import { fakeGpuHost, type FakeGpuHost, realNvidiaSmiAnswers } from "../_helpers/gpus.ts";
import { runMain } from "../_helpers/cli.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { callFunction, deployApp, waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import type { components } from "../../generated/api.d.ts";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";

type App = components["schemas"]["App"];
type Problem = { type: string; status: number; detail?: string };

const H100 = "NVIDIA H100 80GB HBM3";
/** A fake inventory of two GPUs; nvidia-smi is never asked (the machine's own GPUs must not mix in). */
const TWO_GPUS = { RUNPLANE_GPUS: `GPU-aaa:${H100},GPU-bbb:${H100}`, RUNPLANE_NVIDIA_SMI: "/nonexistent/nvidia-smi" };

const MAIN = `
import os, time

def _gpus():
    return {"devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "order": os.environ.get("CUDA_DEVICE_ORDER")}

def hold():
    # Held until the test writes .release into the app's folder (dot-files do not reload the app).
    while not os.path.exists(".release"):
        time.sleep(0.02)
    return _gpus()

def gpus():
    return _gpus()

def devices():
    return sorted(name for name in os.listdir("/dev") if name.startswith("nvidia"))

def cuda():
    import ctypes
    lib = ctypes.CDLL("libcuda.so.1")
    count = ctypes.c_int(-1)
    init = lib.cuInit(0)
    listed = lib.cuDeviceGetCount(ctypes.byref(count)) if init == 0 else None
    return {"init": init, "listed": listed, "count": count.value, **_gpus()}
`;

async function getApp(t: TestServer, app: string): Promise<App> {
  const response = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/${app}`, {
    headers: { Authorization: `Bearer ${t.token}` },
  });
  assert.equal(response.status, 200);
  return (await response.json()) as App;
}

/**
 * Watches which replica holds which GPU (the runtime's own record) until `stop()`, and returns every
 * moment a GPU was held by two replicas at once, and the most replicas that held GPUs at once.
 */
function watchGpus(t: TestServer, app: string): { stop(): { doubled: string[]; most: number } } {
  const doubled: string[] = [];
  let most = 0;
  const timer = setInterval(() => {
    const info = t.server.context.runtime.apps(TEST_PROJECT).find((a) => a.name === app);
    const held = info?.gpus.flatMap((replica) => replica.gpus.map((gpu) => gpu.id)) ?? [];
    if (new Set(held).size < held.length) doubled.push(held.join(","));
    most = Math.max(most, info?.gpus.length ?? 0);
  }, 10);
  return {
    stop() {
      clearInterval(timer);
      return { doubled, most };
    },
  };
}

describe("GPUs from a fake inventory of two", () => {
  let t: TestServer;
  let dir: string;
  before(async () => {
    t = await startTestServer({ env: TWO_GPUS });
    const toml = `[scaling]\nmax_replicas = 3\nreplica_concurrency = 1\ncooldown = 600\n`
      + `[hardware]\ngpu_count = 1\ncompute = "HOPPER_H100"\n`;
    dir = await deployApp(t, "gpu", { toml, files: { "main.py": MAIN } });
  });
  after(() => t.close());

  it("gives each of three concurrent calls' replicas a GPU no other holds: the third waits, then runs", async () => {
    const watch = watchGpus(t, "gpu");
    const calls = [1, 2, 3].map(() => callFunction(t, "gpu", "hold"));
    try {
      await whileTwoHold();
    } finally {
      // Released whatever happened: held calls would keep the server from closing.
      await writeFile(join(dir, ".release"), "");
    }
    const results = await Promise.all(calls);
    for (const { response, error } of results) assert.equal(response.status, 200, JSON.stringify(error));
    const answers = results.map((r) => r.data!.result as { devices: string; order: string });
    // Which two calls held the GPUs first depends on which requests the server read first, not on their order
    // here: the two held at once (whileTwoHold) ran on both GPUs, and the third on one of them.
    const devices = answers.map((a) => a.devices);
    assert.deepEqual([...new Set(devices)].sort(), ["GPU-aaa", "GPU-bbb"], `the calls ran on ${devices.join(", ")}`);
    assert.ok(answers.every((a) => a.order === "PCI_BUS_ID"), "CUDA_DEVICE_ORDER is PCI_BUS_ID");
    const { doubled, most } = watch.stop();
    assert.deepEqual(doubled, [], "no GPU was ever held by two replicas at once");
    assert.equal(most, 2, "never more than two replicas held GPUs");
    const started = t.logs.filter((l) => l.msg === "replica starting" && l.app === `${TEST_PROJECT}/gpu`);
    assert.equal(started.length, 2, "the third call ran on a replica whose call had ended, not on a third replica");
  });

  /** While the first two calls hold both GPUs: the third waits, and getApp, /readyz and /metrics say so. */
  async function whileTwoHold(): Promise<void> {
    await waitFor(() => {
      const { busy, queued } = t.server.context.runtime.capacity(TEST_PROJECT, "gpu");
      return busy === 2 && queued === 1;
    }, "two calls to run and the third to wait");
    assert.ok(t.logs.some((l) => l.msg === "replica waits for host capacity" && l.app === `${TEST_PROJECT}/gpu`));

    const app = await getApp(t, "gpu");
    assert.deepEqual(app.hardware, { cpu: 1, memory: 2, gpu_count: 1, compute: "HOPPER_H100" });
    assert.equal(app.replicas.starting + app.replicas.idle + app.replicas.busy, 2);
    const held = app.replicas.gpus.map((replica) => replica.gpus.map((gpu) => gpu.id));
    assert.deepEqual(held.flat().sort(), ["GPU-aaa", "GPU-bbb"], "each replica holds one GPU, not the same one");
    assert.ok(held.every((gpus) => gpus.length === 1));
    assert.ok(app.replicas.gpus.every((replica) => typeof replica.pid === "number"));
    assert.equal(app.replicas.gpus[0].gpus[0].model, H100);

    const cli = await runMain(["apps", "get", `${TEST_PROJECT}/gpu`], {
      env: { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: t.token },
    });
    assert.match(cli.stdout, /^hardware: 1 core, 2 GiB, 1 GPU \(HOPPER_H100\)$/m);
    for (const replica of app.replicas.gpus) {
      const line = `  replica pid ${replica.pid}: ${replica.gpus[0].id} (${H100})`;
      assert.ok(cli.stdout.split("\n").includes(line), `${JSON.stringify(line)} in:\n${cli.stdout}`);
    }

    const ready = await checkedFetch(`${t.url}/readyz`);
    const gpus = ((await ready.json()) as { gpus: { count: number; held: number; source: string } }).gpus;
    assert.deepEqual([gpus.source, gpus.count, gpus.held], ["RUNPLANE_GPUS", 2, 2]);
    const metrics = await (await checkedFetch(`${t.url}/metrics`)).text();
    assert.match(metrics, /runplane_host_capacity\{resource="gpus",kind="reserved"\} 2/);
    assert.match(metrics, /runplane_replicas_waiting_for_capacity\{app="p-test\/gpu"\} 1/);
  }

  it("refuses an app whose compute no GPU here matches, or that asks more GPUs than match, naming the models", async () => {
    await deployApp(t, "a100", {
      toml: '[hardware]\ngpu_count = 1\ncompute = "AMPERE_A100"\n',
      files: { "main.py": MAIN },
    });
    const wrong = await callFunction(t, "a100", "gpus");
    assert.equal(wrong.response.status, 503);
    assert.equal((wrong.error as Problem).type, "https://runplane.dev/problems/app-unavailable");
    assert.match(
      (wrong.error as Problem).detail ?? "",
      /compute = "AMPERE_A100" matches none of this host's GPUs \(2 × NVIDIA H100 80GB HBM3\)/,
    );
    await deployApp(t, "three", { toml: "[hardware]\ngpu_count = 3\n", files: { "main.py": MAIN } });
    const many = await callFunction(t, "three", "gpus");
    assert.equal(many.response.status, 503);
    assert.match((many.error as Problem).detail ?? "", /gpu_count = 3 is more than this host's 2 GPUs/);
    assert.equal((await getApp(t, "three")).state, "failed");

    // A deployment is refused before anything is stored.
    const token = (await t.mintToken({ scopes: ["deploy", "rest"] })).token;
    const response = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/l4/deployments`, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/gzip" },
      body: new Uint8Array(
        await bundleOf({ "runplane.toml": '[hardware]\ngpu_count = 1\ncompute = "ADA_L4"\n', "main.py": MAIN }),
      ),
    });
    const refusal = (await response.json()) as Problem;
    assert.equal(response.status, 400, JSON.stringify(refusal));
    assert.match(refusal.detail ?? "", /compute = "ADA_L4" matches none of this host's GPUs \(2 × NVIDIA H100/);
  });

  it("hides every GPU from a replica that asked for none", async () => {
    await deployApp(t, "cpu", { toml: '[hardware]\ncompute = "CPU"\n', files: { "main.py": MAIN } });
    const { response, data } = await callFunction(t, "cpu", "gpus");
    assert.equal(response.status, 200);
    assert.deepEqual(data!.result, { devices: "", order: "PCI_BUS_ID" });
    const app = await getApp(t, "cpu");
    assert.deepEqual(app.hardware, { cpu: 1, memory: 2, gpu_count: 0, compute: "CPU" });
    assert.deepEqual(app.replicas.gpus, []);
  });
});

describe("an app waiting for a GPU", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_GPUS: "GPU-only", RUNPLANE_NVIDIA_SMI: "/nonexistent/nvidia-smi" } });
  });
  after(() => t.close());

  it("has an idle replica of another app holding one stopped for it, not one holding only cores", async () => {
    const idle = "[scaling]\ncooldown = 600\n";
    await deployApp(t, "holder", { toml: `${idle}[hardware]\ngpu_count = 1\n`, files: { "main.py": MAIN } });
    // Loaded after the holder: the budget asks it first if it asks in the order apps were loaded.
    await deployApp(t, "cores", { toml: idle, files: { "main.py": MAIN } });
    await deployApp(t, "waiter", { toml: "[hardware]\ngpu_count = 1\n", files: { "main.py": MAIN } });
    assert.equal((await callFunction(t, "cores", "gpus")).response.status, 200);
    assert.equal(((await callFunction(t, "holder", "gpus")).data!.result as { devices: string }).devices, "GPU-only");

    const { response, data, error } = await callFunction(t, "waiter", "gpus");
    assert.equal(response.status, 200, JSON.stringify(error));
    assert.equal((data!.result as { devices: string }).devices, "GPU-only");
    const stopped = t.logs.filter((l) => l.msg === "replica stopping" && l.reason === "making room for another app");
    assert.deepEqual(stopped.map((l) => l.app), [`${TEST_PROJECT}/holder`]);
    assert.equal(t.server.context.runtime.capacity(TEST_PROJECT, "cores").replicas, 1, "the CPU app's replica lives");
    const holders = (await getApp(t, "waiter")).replicas.gpus;
    assert.deepEqual(holders.map((r) => r.gpus.map((g) => g.id)), [["GPU-only"]]);
    assert.deepEqual((await getApp(t, "holder")).replicas.gpus, [], "the stopped replica holds nothing");
  });
});

describe("a host without GPUs", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_GPUS: "none" } });
  });
  after(() => t.close());

  it("refuses an app that asks for a GPU with 503 saying the host has none", async () => {
    await deployApp(t, "gpu", { toml: "[hardware]\ngpu_count = 1\n", files: { "main.py": MAIN } });
    const { response, error } = await callFunction(t, "gpu", "gpus");
    assert.equal(response.status, 503);
    assert.match((error as Problem).detail ?? "", /gpu_count = 1, but this host has no GPUs/);
    const ready = (await (await checkedFetch(`${t.url}/readyz`)).json()) as { gpus: unknown };
    assert.deepEqual(ready.gpus, { source: "RUNPLANE_GPUS", count: 0, held: 0, warnings: [] });
  });
});

describe("a GPU replica's sandbox", () => {
  const GPUS = [
    // Minors unlike the indexes: the node bound is the driver's, not nvidia-smi's index.
    {
      index: 0,
      uuid: "GPU-11111111-2222-3333-4444-555555555555",
      model: H100,
      memoryMiB: 81559,
      busId: "00000000:18:00.0",
      minor: 3,
    },
    {
      index: 1,
      uuid: "GPU-66666666-7777-8888-9999-000000000000",
      model: H100,
      memoryMiB: 81559,
      busId: "00000000:2A:00.0",
      minor: 5,
    },
  ];
  let t: TestServer | undefined;
  let host: FakeGpuHost;
  before(async () => {
    if (!(await sandboxWorks("the GPU device-node tests"))) return;
    host = await fakeGpuHost(GPUS);
    t = await startTestServer({
      env: { RUNPLANE_SANDBOX: "required", RUNPLANE_NVIDIA_SMI: host.nvidiaSmi },
      gpuPaths: { devices: host.deviceDir, driver: host.driverDir },
    });
  });
  after(async () => {
    await t?.close();
    await host?.remove();
  });

  it("holds its own GPU's device node and the driver's shared ones, no other GPU's; a CPU replica none", async (c) => {
    if (!t) return c.skip("the sandbox cannot run here (see the loud message above)");
    await deployApp(t, "gpu", { toml: "[hardware]\ngpu_count = 1\n", files: { "main.py": MAIN } });
    await deployApp(t, "cpu", { toml: "", files: { "main.py": MAIN } });
    const gpu = await callFunction(t, "gpu", "devices");
    assert.equal(gpu.response.status, 200, JSON.stringify(gpu.error));
    assert.deepEqual(gpu.data!.result, ["nvidia-uvm", "nvidia3", "nvidiactl"]);
    const env = (await callFunction(t, "gpu", "gpus")).data!.result;
    assert.deepEqual(env, { devices: GPUS[0].uuid, order: "PCI_BUS_ID" });
    assert.deepEqual((await callFunction(t, "cpu", "devices")).data!.result, []);
  });
});

describe("a real GPU", () => {
  let t: TestServer | undefined;
  before(async () => {
    if (!realNvidiaSmiAnswers()) {
      console.error(
        "\n*** SKIPPED the real CUDA test: nvidia-smi does not answer on this machine (no NVIDIA GPU or driver).\n",
      );
      return;
    }
    // The machine's own inventory: nvidia-smi as it is, the real /dev and /proc.
    t = await startTestServer();
  });
  after(() => t?.close());

  it("runs a CUDA call on the one GPU a gpu_count = 1 replica holds; a replica without GPUs sees none", async (c) => {
    if (!t) return c.skip("nvidia-smi does not answer here: no NVIDIA GPU to run CUDA on");
    const inventory = t.server.context.gpus;
    assert.ok(
      inventory.gpus.length > 0,
      `nvidia-smi answers but the inventory is empty: ${inventory.problems.join("; ")}`,
    );
    await deployApp(t, "cuda", { toml: "[hardware]\ngpu_count = 1\n", files: { "main.py": MAIN } });
    const { response, data, error } = await callFunction(t, "cuda", "cuda");
    assert.equal(response.status, 200, JSON.stringify(error));
    assert.deepEqual(data!.result, {
      init: 0,
      listed: 0,
      count: 1,
      devices: inventory.gpus[0].id,
      order: "PCI_BUS_ID",
    });
    await deployApp(t, "nocuda", { toml: "", files: { "main.py": MAIN } });
    const none = (await callFunction(t, "nocuda", "cuda")).data!.result as { init: number; count: number };
    // CUDA_ERROR_NO_DEVICE (100): CUDA_VISIBLE_DEVICES is empty.
    assert.equal(none.init, 100, JSON.stringify(none));
  });
});
