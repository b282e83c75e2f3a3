/**
 * A seated runtime (issue 31): an app runs here only as many replicas as it holds seats of its
 * cluster-wide count, keeps warm those of its seats below `min_replicas`, refuses a call at once when it
 * holds none, and gives back the seats no replica needs.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { waitFor } from "../_helpers/apps.ts";
import { createLogger } from "../../server/log.ts";
import { newRunId } from "../../server/runs/mod.ts";
import { createRuntime, NoSeatError, type Runtime } from "../../server/runtime/mod.ts";

const MAIN = `
import os

def pid():
    return os.getpid()
`;

/** The processes whose command line names a path under `dir` (the apps' workers and templates). */
async function processesUnder(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    if (cmdline.includes(dir)) found.push(`${pid} ${cmdline.replaceAll("\0", " ")}`);
  }
  return found;
}

const silent = createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, done) => done() }) });

async function writeApp(appsDir: string, name: string, scaling: string): Promise<void> {
  const dir = join(appsDir, "p-x", name);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "runplane.toml"), `[scaling]\n${scaling}`);
  await writeFile(join(dir, "main.py"), MAIN);
}

describe("a seated runtime (replicas counted cluster-wide)", () => {
  let appsDir: string;
  let runtime: Runtime;
  let changes = 0;
  before(async () => {
    appsDir = await mkdtemp(join(tmpdir(), "runplane-seated-"));
    await writeApp(appsDir, "cool", "max_replicas = 2\ncooldown = 0.5\n");
    await writeApp(appsDir, "warm", "min_replicas = 1\nmax_replicas = 2\ncooldown = 0.5\n");
    runtime = createRuntime(appsDir, { logger: silent, queueLimit: 10, seated: true, onLoadChange: () => changes++ });
    await runtime.start();
  });
  after(async () => {
    await runtime.close();
    await rm(appsDir, { recursive: true, force: true });
  });

  const call = (app: string) =>
    runtime.invoke({ projectId: "p-x", app, functionName: "pid", input: {}, runId: newRunId() });
  const replicas = (app: string) => {
    const states = runtime.apps("p-x").find((a) => a.name === app)!.replicas;
    return states.starting + states.idle + states.busy;
  };

  it("refuses a call at once (503) while the app holds no seat here, and starts no replica", async () => {
    await assert.rejects(call("cool"), (error) => error instanceof NoSeatError && error.status === 503);
    assert.equal(replicas("cool"), 0);
    assert.equal(replicas("warm"), 0, "no warm replica without a warm seat");
    assert.equal(runtime.tryAcquireSlot("p-x", "cool"), null);
  });

  it("runs one replica per seat, reports each seat's replica, and gives the seat back after the cooldown", async () => {
    assert.equal(runtime.addSeat({ projectId: "p-x", appId: "cool", seat: 1 }), true);
    const before = changes;
    const outcome = await call("cool");
    assert.equal(outcome.kind, "result");
    assert.ok(changes > before, "the load change was told");
    assert.deepEqual(runtime.heldSeats(), [{ projectId: "p-x", appId: "cool", seat: 1, state: "ready", busy: 0 }]);
    assert.deepEqual(runtime.spareSeats(), [], "its replica is alive: the seat is needed");
    await waitFor(() => replicas("cool") === 0, "the replica stopped after its cooldown", 15_000);
    assert.deepEqual(runtime.spareSeats(), [{ projectId: "p-x", appId: "cool", seat: 1 }]);
    assert.deepEqual(runtime.heldSeats(), []);
    await assert.rejects(call("cool"), NoSeatError);
  });

  it("keeps a replica warm for a warm seat (below min_replicas), and stops it when the seat is lost", async () => {
    assert.equal(runtime.addSeat({ projectId: "p-x", appId: "warm", seat: 0 }), true);
    await waitFor(() => replicas("warm") === 1, "the warm replica started without a call", 15_000);
    assert.deepEqual(runtime.spareSeats(), [], "a warm seat is never spare");
    runtime.dropSeats([{ projectId: "p-x", appId: "warm", seat: 0 }]);
    await waitFor(() => replicas("warm") === 0, "the replica stopped with its seat", 15_000);
  });

  it("refuses a seat of an app it does not serve", () => {
    assert.equal(runtime.addSeat({ projectId: "p-x", appId: "missing", seat: 0 }), false);
  });

  it("leaves no process once closed, the template of a replica stopped while it started included", async () => {
    // The warm replica above was stopped as it started: its template was still getting ready, and a
    // template closed then once started its process anyway and kept it (and the event loop) alive.
    await runtime.close();
    await waitFor(async () => (await processesUnder(appsDir)).length === 0, "every process of the apps gone", 15_000);
  });
});
