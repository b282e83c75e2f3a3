import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { type IncomingMessage, request } from "node:http";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { makeServerDirs, type ServerDirs, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";
import { type AppRef, cancelRun, waitForStatus } from "../_helpers/runs.ts";

const PROJECT = "p-demo";

// Items of 1 MiB: one fills the stream's window, so a reader that stops reading stalls the generator
// at once, waiting for credit.
const MAIN = `
import asyncio, os, time

def flood(progress, marker):
    item = "x" * 1048576
    try:
        for i in range(1000):
            with open(progress, "w") as f:
                f.write(str(i))
            yield item
    except GeneratorExit:
        open(marker, "w").close()
        raise

async def aflood(progress, marker):
    item = "x" * 1048576
    try:
        for i in range(1000):
            with open(progress, "w") as f:
                f.write(str(i))
            yield item
    except GeneratorExit:
        open(marker, "w").close()
        raise

def slow(seconds):
    time.sleep(seconds)
    return os.getpid()

def pid():
    return os.getpid()
`;

describe("a stream stalled on credit stops when it is cancelled, and its worker lives", () => {
  let server: ServerProcess;
  let dirs: ServerDirs;
  let ref: AppRef;
  before(async () => {
    dirs = await makeServerDirs("runplane-cancel-stalled-");
    await dirs.deploy("stall", {
      "runplane.toml": "[scaling]\nmax_replicas = 1\nreplica_concurrency = 2\nresponse_grace_period = 120\n",
      "main.py": MAIN,
    });
    // The functions write marker files the test reads back: a jailed app cannot (test/sandbox/ covers the jail).
    server = await startServerProcess({ ...dirs.env, RUNPLANE_SANDBOX: "off" });
    ref = { client: server.client, project: PROJECT, app: "stall" };
  });
  after(async () => {
    await server.kill();
    await dirs.remove();
  });

  async function post(fn: string, body: unknown): Promise<Response> {
    return await fetch(`${server.url}/v4/${PROJECT}/stall/${fn}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  }

  async function workerPid(): Promise<number> {
    const answer = await post("pid", {});
    const body = await answer.json() as { result: number };
    assert.equal(answer.status, 200, JSON.stringify(body));
    return body.result;
  }

  /** Opens a stream of `fn` and stops reading it once the generator stalls; resolves with its request and run id. */
  async function stall(fn: string, name: string) {
    const progress = join(dirs.root, `${name}.progress`);
    const marker = join(dirs.root, `${name}.closed`);
    const stalled = request(new URL(`/v4/${PROJECT}/stall/${fn}`, server.url), {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
    });
    stalled.on("error", () => undefined);
    const response = await new Promise<IncomingMessage>((resolve, reject) => {
      stalled.once("response", resolve);
      stalled.once("error", reject);
      stalled.end(JSON.stringify({ progress, marker }));
    });
    assert.equal(response.statusCode, 200);
    response.pause();
    const runId = String(response.headers["x-request-id"]);
    // Wait until the generator stopped moving: it waits for credit.
    let last = -1;
    for (let round = 0; round < 60; round++) {
      await sleep(500);
      const now = existsSync(progress) ? Number(readFileSync(progress, "utf8")) : -1;
      if (now >= 0 && now === last) break;
      last = now;
    }
    const reached = Number(readFileSync(progress, "utf8"));
    assert.ok(reached < 200, `the generator ran ahead of a stalled reader to item ${reached}`);
    return { stalled, response, runId, progress, marker };
  }

  /**
   * Waits (up to 20 s, for a loaded machine) for the generator's GeneratorExit marker; resolves with the
   * milliseconds since `since`. The run may be recorded cancelled before the worker closed the generator.
   */
  async function closedWithin(marker: string, since: number): Promise<number> {
    while (!existsSync(marker)) {
      assert.ok(performance.now() - since < 20_000, "the generator never saw GeneratorExit");
      await sleep(20);
    }
    return performance.now() - since;
  }

  function killLines(): string[] {
    return server.logs
      .map((entry) => String(entry.msg ?? ""))
      .filter((msg) => msg.startsWith("cancelled call did not stop"));
  }

  for (const fn of ["flood", "aflood"]) {
    it(`${fn}: a disconnect stops the stalled generator within the grace; the other call succeeds`, async () => {
      const before = await workerPid();
      const { stalled, runId, marker } = await stall(fn, `${fn}-disconnect`);
      // Another call on the same worker, running while the stalled one is cancelled.
      const other = post("slow", { seconds: 3 });
      await sleep(300);
      const cancelledAt = performance.now();
      stalled.destroy();
      // "Within the grace" is proven by the worker's survival below (past the 1 s grace it is killed, and
      // then never writes the marker), not by how soon this process, on a loaded machine, sees the marker.
      const took = await closedWithin(marker, cancelledAt);
      console.log(`${fn}: the generator saw GeneratorExit ${Math.round(took)} ms after the disconnect`);
      const run = await waitForStatus(ref, runId, ["cancelled", "failure", "success"], 10_000);
      assert.notEqual(run.status, "success");
      const answer = await other;
      const body = await answer.json() as { result?: number };
      assert.equal(answer.status, 200, JSON.stringify(body));
      assert.equal(body.result, before, "the other call ran on the same worker");
      // Past the cancel grace (1 s): the worker was not killed.
      await sleep(1500);
      assert.equal(await workerPid(), before, "the same worker serves the next call");
      assert.deepEqual(killLines(), []);
    });
  }

  it("cancelRun of a stalled stream stops it within the grace; the worker lives", async () => {
    const before = await workerPid();
    const { stalled, runId, marker } = await stall("flood", "cancel-run");
    const other = post("slow", { seconds: 3 });
    await sleep(300);
    const cancelledAt = performance.now();
    const { response } = await cancelRun(ref, runId);
    assert.ok(response.status < 300, `cancelRun answered ${response.status}`);
    // Within the grace: the worker survives it below (see the disconnect tests).
    const took = await closedWithin(marker, cancelledAt);
    console.log(`cancelRun: the generator saw GeneratorExit ${Math.round(took)} ms after cancelRun`);
    const run = await waitForStatus(ref, runId, ["cancelled"], 10_000);
    assert.equal(run.status, "cancelled");
    stalled.destroy();
    const answer = await other;
    const body = await answer.json() as { result?: number };
    assert.equal(answer.status, 200, JSON.stringify(body));
    assert.equal(body.result, before);
    await sleep(1500);
    assert.equal(await workerPid(), before, "the same worker serves the next call");
    assert.deepEqual(killLines(), []);
  });
});
