/**
 * Ctrl-C as a terminal sends it: SIGINT to every process of the foreground process group. Under `npm start`
 * that is npm and the server (and, with `RUNPLANE_WORKERS`, the supervisor's workers), and npm relays its
 * own copy to the server, so one keypress arrives two or three times within a moment. One keypress drains;
 * a second one, a moment later, cuts the drain short.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, it } from "node:test";
import { Agent } from "undici";
import { readServerEvents } from "../../client/event_stream.ts";
import { SIGNAL_COPY_WINDOW_MS } from "../../server/main.ts";
import { waitFor } from "../_helpers/apps.ts";
import { callThrough } from "../_helpers/host_calls.ts";
import { makeServerDirs, PROCESS_PROJECT, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";

const ROOT = join(import.meta.dirname, "..", "..");

const APP = `import time

def slow(seconds=3, marker=None):
    open(marker, "w").close()
    time.sleep(seconds)
    return {"slept": seconds}

def ticks(n=6, pause=0.5):
    for i in range(n):
        yield i
        time.sleep(pause)
`;

const TWO_REPLICAS = "[scaling]\nmin_replicas = 2\nmax_replicas = 2\n";

/** When npm's relayed copy of a Ctrl-C may reach the server on a loaded machine: well within the window. */
const LATE_COPY_MS = SIGNAL_COPY_WINDOW_MS * 0.3;

/**
 * Past the server's window for copies of one signal, with room for a loaded machine: counted from the
 * moment every process logged that it drains, so from when each of them took the first signal.
 */
const DELIBERATE_PAUSE_MS = SIGNAL_COPY_WINDOW_MS * 2;

/** `npm start` in its own process group (as a terminal's foreground job), with `env` and `workers`. */
async function startUnderNpm(env: Record<string, string>, workers: number): Promise<ServerProcess> {
  return await startServerProcess({ ...env, RUNPLANE_WORKERS: String(workers), RUNPLANE_SANDBOX: "off" }, {
    ownProcessGroup: true,
    wrap: () => ["npm", "--prefix", ROOT, "start"],
  });
}

/** Opens a stream of `ticks` and resolves once its first item arrived; `rest` reads the others. */
async function openStream(server: ServerProcess): Promise<{ rest: Promise<string[]> }> {
  const { response } = await callThrough(server, `/v4/${PROCESS_PROJECT}/work/ticks`, {});
  if (response.status !== 200) assert.fail(`the stream answered ${response.status}: ${await response.text()}`);
  const events = readServerEvents(response.body!)[Symbol.asyncIterator]();
  const first = await events.next();
  assert.ok(!first.done, "the stream's first item arrived");
  const rest = (async () => {
    const items = [first.value.data];
    for (let next = await events.next(); !next.done; next = await events.next()) items.push(next.value.data);
    return items;
  })();
  return { rest };
}

/** Whether every process of the host (the server, or the supervisor and its workers) logged that it drains. */
function allDraining(server: ServerProcess, workers: number): boolean {
  const processes = workers > 1 ? workers + 1 : 1;
  return server.logs.filter((entry) => String(entry.msg).startsWith("draining")).length >= processes;
}

describe("Ctrl-C on npm start", { timeout: 240_000 }, () => {
  for (const workers of [1, 2]) {
    const host = workers > 1 ? `with ${workers} workers` : "alone";
    it(`(${host}) one Ctrl-C to the process group drains: a 3 s call and a stream finish, npm exits 0`, async () => {
      const dirs = await makeServerDirs("runplane-ctrl-c-");
      // Two warm replicas: the call and the stream run side by side from the start.
      await dirs.deploy("work", { "runplane.toml": TWO_REPLICAS, "main.py": APP });
      const server = await startUnderNpm(dirs.env, workers);
      try {
        const marker = join(dirs.root, "slow-started");
        const sync = callThrough(server, `/v4/${PROCESS_PROJECT}/work/slow`, { seconds: 3, marker });
        const stream = await openStream(server);
        await waitFor(() => existsSync(marker), "the 3 s call to start", 30_000);
        process.kill(-server.child.pid!, "SIGINT");
        // npm relays its copy to the server at once, where the kernel may merge it with the group's if the
        // server has not taken that one yet; on a loaded machine it comes later, as this one to npm does.
        await sleep(LATE_COPY_MS);
        // (npm gone by then means the copy cut the drain short: the call's answer below says so.)
        if (server.child.exitCode === null) process.kill(server.child.pid!, "SIGINT");

        const { response } = await sync;
        assert.equal(response.status, 200, await response.clone().text());
        assert.deepEqual(((await response.json()) as { result: unknown }).result, { slept: 3 });
        assert.deepEqual(await stream.rest, ["0", "1", "2", "3", "4", "5"], "every item of the stream arrived");
        const exit = await server.exited;
        assert.deepEqual(exit, { code: 0, signal: null }, server.stderr());
        const cut = server.logs.filter((entry) => String(entry.msg).includes("cut short"));
        assert.deepEqual(cut, [], "one Ctrl-C did not cut the drain short");
        const drainAt = server.logs.findIndex((entry) => String(entry.msg).startsWith("draining"));
        const answered = server.logs.flatMap((entry, at) => entry.msg === "request" ? [at] : []);
        assert.ok(
          drainAt >= 0 && answered.length === 2 && answered.every((at) => at > drainAt),
          "both calls were still running when the drain began",
        );
      } finally {
        if (server.child.exitCode === null) process.kill(-server.child.pid!, "SIGKILL");
        await dirs.remove();
      }
    });

    it(`(${host}) a second Ctrl-C a moment later cuts the drain short: the call in flight ends interrupted`, async () => {
      const dirs = await makeServerDirs("runplane-ctrl-c-");
      await dirs.deploy("work", { "runplane.toml": TWO_REPLICAS, "main.py": APP });
      const server = await startUnderNpm(dirs.env, workers);
      // A client that keeps its connection for longer than the server's keep-alive timeout: the stopping server
      // must close it once the call is answered, not wait on it.
      const kept = new Agent({ keepAliveTimeout: 120_000, keepAliveMaxTimeout: 120_000 });
      try {
        const marker = join(dirs.root, "slow-started");
        // Far longer than the test waits before the second Ctrl-C: it is still running when that lands.
        const sync = callThrough(server, `/v4/${PROCESS_PROJECT}/work/slow`, { seconds: 60, marker }, { via: kept });
        await waitFor(() => existsSync(marker), "the long call to start", 30_000);
        process.kill(-server.child.pid!, "SIGINT");
        await waitFor(() => allDraining(server, workers), "every process to drain", 30_000);
        await sleep(DELIBERATE_PAUSE_MS);
        // (npm gone by then means the first Ctrl-C cut the call: its answer below says so.)
        if (server.child.exitCode === null) process.kill(-server.child.pid!, "SIGINT");

        const { response } = await sync;
        const problem = (await response.json()) as { type?: string; run_id?: string };
        assert.equal(response.status, 409, JSON.stringify(problem));
        assert.match(String(problem.type), /\/interrupted$/);
        const answeredAt = Date.now();
        const exit = await server.exited;
        // Loose on purpose (a loaded machine): what it rules out is waiting out the 65 s keep-alive timeout.
        assert.ok(Date.now() - answeredAt < 45_000, "the server waited on the answered call's kept-alive connection");
        assert.deepEqual(exit, { code: 0, signal: null }, server.stderr());
        assert.ok(
          server.logs.some((entry) => String(entry.msg).startsWith("drain cut short")),
          "the log says the drain was cut short",
        );
      } finally {
        if (server.child.exitCode === null) process.kill(-server.child.pid!, "SIGKILL");
        await kept.close();
        await dirs.remove();
      }
    });
  }
});
