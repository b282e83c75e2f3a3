import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { alive, waitFor } from "../_helpers/apps.ts";
import { createLogger } from "../../server/log.ts";
import { newRunId } from "../../server/runs/mod.ts";
import { createRuntime, RunFailure, type Runtime } from "../../server/runtime/mod.ts";

const MAIN = `
import os, time

def add(a, b):
    return a + b

def tokens(n):
    for i in range(n):
        yield {"i": i}
    yield "end"

def stuck(seconds):
    time.sleep(seconds)
    return "late"

def boom():
    raise KeyError("missing")

def pid():
    return os.getpid()
`;

const silent = createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, done) => done() }) });

describe("runtime module API (as an async dispatcher uses it)", () => {
  let appsDir: string;
  let runtime: Runtime;
  before(async () => {
    appsDir = await mkdtemp(join(tmpdir(), "runplane-runtime-"));
    const dir = join(appsDir, "p-x", "app");
    await mkdir(dir, { recursive: true });
    await writeFile(
      join(dir, "runplane.toml"),
      "[scaling]\nmax_replicas = 1\nreplica_concurrency = 2\nresponse_grace_period = 20\n",
    );
    await writeFile(join(dir, "main.py"), MAIN);
    runtime = createRuntime(appsDir, { logger: silent, queueLimit: 10 });
    await runtime.start();
  });
  after(async () => {
    await runtime.close();
    await rm(appsDir, { recursive: true, force: true });
  });

  const request = (functionName: string, input: Record<string, unknown> = {}) => ({
    projectId: "p-x",
    app: "app",
    functionName,
    input,
    runId: newRunId(),
  });

  it("makes unique, time-ordered run ids matching the contract", () => {
    const ids = Array.from({ length: 1000 }, () => newRunId());
    assert.equal(new Set(ids).size, 1000);
    assert.deepEqual([...ids].sort(), ids);
    for (const id of ids.slice(0, 5)) assert.match(id, /^run_[0-9a-z]{26}$/);
    assert.ok(newRunId(Date.now() + 60_000) > ids[999]);
  });

  it("exposes the app's grace period and capacity, and reserves slots without queueing", async () => {
    assert.equal(runtime.appSettings("p-x", "app").responseGracePeriodMs, 20_000);
    const a = runtime.tryAcquireSlot("p-x", "app");
    const b = runtime.tryAcquireSlot("p-x", "app");
    assert.ok(a && b);
    assert.equal(runtime.tryAcquireSlot("p-x", "app"), null, "both slots are taken");
    assert.deepEqual({ ...runtime.capacity("p-x", "app"), replicas: 0 }, {
      slots: 2,
      busy: 2,
      queued: 0,
      queueLimit: 10,
      replicas: 0,
      waitingForCapacity: 0,
    });
    const outcome = await runtime.invoke({ ...request("add", { a: 1, b: 2 }), lease: a });
    assert.equal(outcome.kind === "result" && outcome.result, 3);
    b.release();
    assert.equal(runtime.capacity("p-x", "app").busy, 0);
  });

  it("lets a caller collect a stream into a list", async () => {
    const outcome = await runtime.invoke(request("tokens", { n: 3 }));
    assert.equal(outcome.kind, "stream");
    const items: unknown[] = [];
    if (outcome.kind === "stream") { for await (const item of outcome.items) items.push(item.value); }
    assert.deepEqual(items, [{ i: 0 }, { i: 1 }, { i: 2 }, "end"]);
  });

  it("types failures with errorType, message, traceback and status", async () => {
    const failure = await runtime.invoke(request("boom")).then(() => undefined, (error: unknown) => error);
    assert.ok(failure instanceof RunFailure);
    assert.equal(failure.errorType, "KeyError");
    assert.equal(failure.status, 500);
    assert.match(failure.traceback ?? "", /KeyError: 'missing'/);
    const bad = await runtime.invoke(request("add", { a: 1 })).catch((error: RunFailure) => error);
    assert.deepEqual([(bad as RunFailure).errorType, (bad as RunFailure).status], ["invalid_arguments", 422]);
  });

  it("interrupts a running call through its AbortSignal, replacing a worker that cannot stop", async () => {
    const pid = await runtime.invoke(request("pid")).then((o) => (o.kind === "result" ? (o.result as number) : 0));
    const abort = new AbortController();
    const call = runtime.invoke({ ...request("stuck", { seconds: 30 }), signal: abort.signal });
    setTimeout(() => abort.abort(), 300);
    const failure = (await call.catch((error: unknown) => error)) as RunFailure;
    assert.equal(failure.errorType, "interrupted");
    // time.sleep cannot be interrupted: the worker is killed after the cancel grace period.
    await waitFor(() => !alive(pid), "the stuck worker to be killed", 10_000);
    await waitFor(() => runtime.capacity("p-x", "app").busy === 0, "the slot to be free");
    const next = await runtime.invoke(request("add", { a: 2, b: 2 }));
    assert.equal(next.kind === "result" && next.result, 4);
  });

  it("leaves no worker behind when the server process is killed with SIGKILL", async () => {
    const script = `
      import { createRuntime } from ${JSON.stringify(new URL("../../server/runtime/mod.ts", import.meta.url).href)};
      import { newRunId } from ${JSON.stringify(new URL("../../server/runs/mod.ts", import.meta.url).href)};
      import { createLogger } from ${JSON.stringify(new URL("../../server/log.ts", import.meta.url).href)};
      const runtime = createRuntime(${
      JSON.stringify(appsDir)
    }, { logger: createLogger({ level: "silent" }), queueLimit: 1 });
      await runtime.start();
      const outcome = await runtime.invoke({ projectId: "p-x", app: "app", functionName: "pid", input: {}, runId: newRunId() });
      process.stdout.write(String(outcome.result) + "\\n");
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const pid = await new Promise<number>((resolve) =>
      child.stdout.once("data", (chunk) => resolve(Number(String(chunk).trim())))
    );
    assert.ok(pid > 0 && alive(pid));
    child.kill("SIGKILL");
    await waitFor(() => !alive(pid), "the orphaned worker to exit", 10_000);
  });
});
