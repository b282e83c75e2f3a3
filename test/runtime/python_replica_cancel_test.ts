import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { unjailedSandbox } from "../../server/sandbox/mod.ts";
import { PythonReplica } from "../../server/runtime/_python_replica.ts";
import type { CallOutcome } from "../../server/runtime/_outcome.ts";

const MAIN = `
import os, time

def flood():
    item = "x" * 1048576
    while True:
        yield item

def slow(seconds):
    time.sleep(seconds)
    return os.getpid()

def pid():
    return os.getpid()
`;

/** How long past the replica's cancel grace (1 s) the tests wait before they check the worker lives. */
const PAST_GRACE_MS = 1800;

describe("PythonReplica cancels a call once, and never kills its worker for a call that stopped", () => {
  let dir: string;
  let replica: PythonReplica;
  const lines: Array<Record<string, unknown>> = [];
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-replica-cancel-"));
    await writeFile(join(dir, "main.py"), MAIN);
    const logger = createLogger({
      level: "info",
      destination: new Writable({
        write(chunk, _encoding, done) {
          for (const line of String(chunk).split("\n")) if (line) lines.push(JSON.parse(line));
          done();
        },
      }),
    });
    replica = new PythonReplica({
      appDir: dir,
      label: "p-x/app",
      python: "python3",
      concurrency: 2,
      logger,
      sandbox: unjailedSandbox(),
      jail: { projectId: "p-x", cwd: dir, egress: false, env: {} },
    });
    await replica.ready;
  });
  after(async () => {
    await replica.stop();
    await rm(dir, { recursive: true, force: true });
  });

  let calls = 0;
  function call(functionName: string, options: { kwargs?: Record<string, unknown>; signal?: AbortSignal } = {}) {
    let settled = false;
    const outcome = replica.call({
      runId: `run_test_${++calls}`,
      functionName,
      kwargs: options.kwargs ?? {},
      graceMs: 60_000,
      signal: options.signal,
      onSettled: () => (settled = true),
    });
    return { outcome, settled: () => settled };
  }

  async function result(outcome: Promise<CallOutcome>): Promise<unknown> {
    const answer = await outcome;
    assert.equal(answer.kind, "result");
    return (answer as { result: unknown }).result;
  }

  const warnings = () => lines.filter((line) => String(line.msg).startsWith("cancelled call did not stop"));

  it("a call whose signal aborted before it was sent ends at once and costs the worker nothing", async () => {
    const pid = replica.pid;
    const aborted = call("slow", { kwargs: { seconds: 5 }, signal: AbortSignal.abort() });
    await assert.rejects(aborted.outcome, { name: "RunFailure", errorType: "interrupted" });
    assert.ok(aborted.settled(), "its slot is free at once");
    await sleep(PAST_GRACE_MS);
    assert.ok(replica.usable);
    assert.equal(await result(call("pid").outcome), pid);
    assert.deepEqual(warnings(), []);
  });

  it("a stream cancelled twice (signal, then its reader's return) stops, and its worker serves on", async () => {
    const pid = replica.pid;
    const controller = new AbortController();
    const stream = call("flood", { signal: controller.signal });
    const answer = await stream.outcome;
    assert.equal(answer.kind, "stream");
    const items = (answer as { items: AsyncIterable<unknown> }).items[Symbol.asyncIterator]();
    assert.equal(((await items.next()).value as { value: string }).value.length, 1048576);
    // The reader stops here: the generator waits for credit. Another call runs on the same worker.
    const other = call("slow", { kwargs: { seconds: 2.5 } });
    await sleep(300);
    controller.abort();
    await items.return?.(undefined);
    for (let i = 0; i < 30 && !stream.settled(); i++) await sleep(100);
    assert.ok(stream.settled(), "the worker stopped the stream");
    assert.equal(await result(other.outcome), pid, "the other call succeeded on the same worker");
    await sleep(PAST_GRACE_MS);
    assert.ok(replica.usable, "the worker was not killed");
    assert.equal(await result(call("pid").outcome), pid);
    assert.deepEqual(warnings(), []);
  });
});
