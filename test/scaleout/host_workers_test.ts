/**
 * Several front-door processes on one host (issue 33, `RUNPLANE_WORKERS`): a supervisor that alone runs
 * the replicas, and workers that share the port. Calls of every kind spread over the workers; a cancel,
 * an idempotency key, a drain and a killed process hold across them as they do across hosts. Each
 * connection is its own undici Agent, so the supervisor's round robin hands them to different workers,
 * and each answer says which one took it (`X-Runplane-Worker`).
 */
import assert from "node:assert/strict";
import { type AddressInfo, createServer as createNetServer } from "node:net";
import { after, before, describe, it } from "node:test";
import type { Agent } from "undici";
import { alive, waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { callThrough, connection } from "../_helpers/host_calls.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import { descendants, nodeChildren, stillRunning } from "../_helpers/process_tree.ts";
import { makeServerDirs, type ServerDirs, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";

const PROJECT = "p-demo";

const APP = `import os, time

def echo(text=""):
    return {"text": text, "pid": os.getpid()}

def slow(seconds=2, marker=None):
    time.sleep(seconds)
    return {"slept": seconds}

def ticks(n=4, pause=0.1):
    for i in range(n):
        yield i
        time.sleep(pause)
`;

const TOML = `[deployment]\nname = "work"\n\n[scaling]\nmax_replicas = 2\nreplica_concurrency = 8\n`;

type RunResult = { run_id: string; result?: unknown; status?: string };

for (const engine of await engines()) {
  describe(`a host with two workers (${engine})`, () => {
    let dirs: ServerDirs;
    let database: TestDatabase | undefined;
    let server: ServerProcess;

    async function start(): Promise<ServerProcess> {
      return await startServerProcess({
        ...dirs.env,
        ...(database ? { RUNPLANE_DATABASE_URL: database.url } : {}),
        RUNPLANE_WORKERS: "2",
        RUNPLANE_SANDBOX: "off",
        RUNPLANE_RUN_LEASE: "3s",
      }, { token: server?.token });
    }

    before(async () => {
      dirs = await makeServerDirs("runplane-workers-");
      await dirs.deploy("work", { "runplane.toml": TOML, "main.py": APP });
      database = engine === "postgres" ? await createTestDatabase() : undefined;
      server = await start();
    });
    after(async () => {
      if (server && server.child.exitCode === null && server.child.signalCode === null) await server.kill();
      await database?.drop();
      await dirs?.remove();
    });

    async function call(
      fn: string,
      body: Record<string, unknown>,
      options: { via?: Agent; query?: string; headers?: Record<string, string>; signal?: AbortSignal } = {},
    ): Promise<{ response: Response; worker: string }> {
      return await callThrough(server, `/v4/${PROJECT}/work/${fn}${options.query ?? ""}`, body, options);
    }

    async function runRecord(runId: string, via?: Agent): Promise<RunResult & { status: string }> {
      const response = await checkedFetch(`${server.url}/v4/projects/${PROJECT}/apps/work/runs/${runId}`, {
        headers: { Authorization: `Bearer ${server.token}` },
        dispatcher: via ?? connection(),
      } as RequestInit);
      assert.equal(response.status, 200, await response.clone().text());
      return (await response.json()) as RunResult & { status: string };
    }

    /** Resolves once `count` runs of `slow` are running (accepted, recorded, and on a replica). */
    async function running(count: number): Promise<void> {
      await waitFor(
        async () => {
          const response = await checkedFetch(
            `${server.url}/v4/projects/${PROJECT}/runs?status=running&app_id=work&function_name=slow`,
            { headers: { Authorization: `Bearer ${server.token}` } },
          );
          return (((await response.json()) as { runs?: unknown[] }).runs ?? []).length >= count;
        },
        `${count} slow runs to be running`,
        20_000,
      );
    }

    /** Two connections that landed on different workers. */
    async function twoWorkers(): Promise<[Agent, Agent]> {
      const first = connection();
      const { worker } = await call("echo", {}, { via: first });
      for (let tries = 0; tries < 20; tries++) {
        const other = connection();
        const answer = await call("echo", {}, { via: other });
        if (answer.worker !== worker) return [first, other];
      }
      throw new Error("twenty new connections all reached one worker");
    }

    it("spreads sync, stream and async calls over the workers, all run on the supervisor's replicas", async () => {
      const workers = new Set<string>();
      const pids = new Set<number>();
      for (let i = 0; i < 8; i++) {
        const { response, worker } = await call("echo", { text: `t${i}` });
        assert.equal(response.status, 200, await response.clone().text());
        workers.add(worker);
        pids.add(((await response.json()) as { result: { pid: number } }).result.pid);
      }
      assert.deepEqual([...workers].sort(), ["1", "2"], "both workers took calls");
      const stream = await call("ticks", {}, { headers: { Accept: "text/event-stream" } });
      assert.equal(stream.response.status, 200);
      const events = (await stream.response.text()).split("\n\n").filter((block) => block.includes("data:"));
      assert.equal(events.filter((e) => !e.includes("event:")).length, 4, "one event per yielded item");
      const accepted = await Promise.all(
        [0, 1, 2, 3].map(() => call("echo", { text: "async" }, { query: "?async=true" })),
      );
      const async = new Set(accepted.map((a) => a.worker));
      assert.ok(async.size === 2, `async calls reached both workers: ${[...async]}`);
      for (const { response } of accepted) {
        assert.equal(response.status, 202);
        const { run_id } = (await response.json()) as RunResult;
        await waitFor(
          async () => (await runRecord(run_id)).status === "success",
          `async run ${run_id} to succeed`,
          20_000,
        );
      }
      // The supervisor's replicas ran them: the workers themselves started no Python.
      for (const pid of pids) assert.ok(alive(pid), `replica ${pid} runs`);
    });

    it("shows the supervisor's replicas through every worker (getApp, /readyz)", async () => {
      const via = await twoWorkers();
      await waitFor(
        async () => {
          const views = await Promise.all(via.map(async (dispatcher) => {
            const response = await checkedFetch(`${server.url}/v3/projects/${PROJECT}/apps/work`, {
              headers: { Authorization: `Bearer ${server.token}` },
              dispatcher,
            } as RequestInit);
            assert.equal(response.status, 200, await response.clone().text());
            return ((await response.json()) as { replicas: { starting: number; idle: number; busy: number } }).replicas;
          }));
          return views.every((replicas) => replicas.idle + replicas.busy >= 1);
        },
        "both workers to show the supervisor's warm replica",
        10_000,
      );
      for (const dispatcher of via) {
        const ready = await checkedFetch(`${server.url}/readyz`, { dispatcher } as RequestInit);
        assert.equal(ready.status, 200, await ready.clone().text());
        const body = (await ready.json()) as { sandbox: { setting: string }; gpus: { held: number } };
        assert.equal(body.sandbox.setting, "off", "the supervisor's sandbox, as it started it");
      }
    });

    /** The sum of the values of `name`'s series whose labels include every one of `labels`, from `/metrics`. */
    async function metric(via: Agent, name: string, labels: string[]): Promise<number> {
      const response = await checkedFetch(`${server.url}/metrics`, { dispatcher: via } as RequestInit);
      assert.equal(response.status, 200, await response.clone().text());
      let sum = 0;
      for (const line of (await response.text()).split("\n")) {
        if (!line.startsWith(`${name}{`) || !labels.every((label) => line.includes(label))) continue;
        sum += Number(line.slice(line.lastIndexOf(" ") + 1));
      }
      return sum;
    }

    it("answers /metrics with the host's figures through every worker: each process's counts summed", async () => {
      const via = await twoWorkers();
      const finished = ['app="' + PROJECT + '/work"', 'mode="sync"', 'status="success"'];
      const before = await Promise.all(via.map((v) => metric(v, "runplane_runs_finished_total", finished)));
      assert.equal(before[0], before[1], "both workers answer the same host total");
      for (let i = 0; i < 6; i++) {
        const { response } = await call("echo", { text: `m${i}` }, { via: via[i % 2] });
        assert.equal(response.status, 200);
      }
      const after = await Promise.all(via.map((v) => metric(v, "runplane_runs_finished_total", finished)));
      assert.deepEqual(
        after,
        [before[0] + 6, before[0] + 6],
        "six calls, three through each worker, counted once each",
      );
      // Replicas are the supervisor's: a worker's mirror of them is not added to them.
      for (const v of via) {
        const replicas = await metric(v, "runplane_replicas", ['app="' + PROJECT + '/work"']);
        assert.ok(replicas >= 1 && replicas <= 2, `the app's replicas (max_replicas = 2): ${replicas}`);
      }
    });

    it("cancels a sync call from the other worker, and one idempotency key sent to both makes one run", async () => {
      const [a, b] = await twoWorkers();
      const running = call("slow", { seconds: 30 }, { via: a });
      // The run's id: the newest running run, found through the other worker.
      let runId = "";
      await waitFor(
        async () => {
          const response = await checkedFetch(`${server.url}/v4/projects/${PROJECT}/runs?status=running&app_id=work`, {
            headers: { Authorization: `Bearer ${server.token}` },
            dispatcher: b,
          } as RequestInit);
          const runs = ((await response.json()) as { runs?: Array<{ run_id: string }> }).runs ?? [];
          runId = runs[0]?.run_id ?? "";
          return runId !== "";
        },
        "the slow run to be running",
        20_000,
      );
      const cancel = await checkedFetch(`${server.url}/v4/projects/${PROJECT}/apps/work/runs/${runId}`, {
        method: "DELETE",
        headers: { Authorization: `Bearer ${server.token}` },
        dispatcher: b,
      } as RequestInit);
      assert.ok(cancel.status < 300, await cancel.clone().text());
      const { response } = await running;
      // The caller's answer says the run stopped (409, its id); the record says why.
      assert.equal(response.status, 409, await response.clone().text());
      assert.equal(((await response.json()) as RunResult).run_id, runId);
      assert.equal((await runRecord(runId)).status, "cancelled");

      const key = `one-${Date.now()}`;
      const both = await Promise.all(
        [a, b].map((via) => call("slow", { seconds: 1 }, { via, headers: { "Idempotency-Key": key } })),
      );
      assert.notEqual(both[0].worker, both[1].worker, "the key went to both workers");
      // One runs; the other is told it is still running (409 with its id), as on one process.
      const answers = await Promise.all(both.map(async ({ response }) => ({
        status: response.status,
        runId: ((await response.json()) as RunResult).run_id,
      })));
      assert.deepEqual(answers.map((a) => a.status).sort(), [200, 409], JSON.stringify(answers));
      const ids = answers.map((a) => a.runId);
      assert.equal(ids[0], ids[1], "one run for the key");
    });

    /** The supervisor's workers: its children that run Node (the replicas run Python). */
    async function workerPids(): Promise<number[]> {
      return await nodeChildren(server.child.pid!);
    }

    it("keeps serving after kill -9 of one worker, which another takes the place of; its runs end", async () => {
      const before = await workerPids();
      assert.equal(before.length, 2, `two workers: ${before}`);
      // A call in flight on each worker (connections known to reach both: new ones are dealt round robin
      // to whichever worker is free, so four at once may all reach one): the killed one's is cut, the
      // other's answered, and the cut run must still end.
      const inFlight = (await twoWorkers()).map((via) =>
        call("slow", { seconds: 6 }, { via }).then((answer) => answer.response.status, (error) => `cut: ${error}`)
      );
      await running(2);
      process.kill(before[0], "SIGKILL");
      await waitFor(() => !alive(before[0]), "the worker to die");
      for (let i = 0; i < 6; i++) {
        const answer = await call("echo", { text: "still" });
        assert.equal(answer.response.status, 200, `call ${i} after the kill`);
      }
      await waitFor(
        async () => {
          const now = await workerPids();
          return now.length === 2 && !now.includes(before[0]);
        },
        "a new worker to take its place",
        20_000,
      );
      const workers = new Set<string>();
      await waitFor(
        async () => {
          workers.add((await call("echo", {})).worker);
          return workers.size === 2;
        },
        "calls to reach the new worker too",
        20_000,
      );
      const outcomes = await Promise.all(inFlight);
      const told = () =>
        `${outcomes}; the host's warnings: ${
          JSON.stringify(server.logs.filter((line) => Number(line.level) >= 40).slice(-8))
        }; stderr: ${server.stderr().slice(-2000)}`;
      assert.ok(outcomes.includes(200), `the other worker's call was answered: ${told()}`);
      assert.ok(outcomes.some((o) => String(o).startsWith("cut")), `the killed worker's call was cut: ${told()}`);
      // No run is left running: the killed worker's end once its process is found gone (or its lease ends).
      await waitFor(
        async () => {
          const response = await checkedFetch(
            `${server.url}/v4/projects/${PROJECT}/runs?status=running&app_id=work&function_name=slow`,
            { headers: { Authorization: `Bearer ${server.token}` } },
          );
          return (((await response.json()) as { runs?: unknown[] }).runs ?? []).length === 0;
        },
        "the killed worker's runs to end",
        30_000,
      );
    });

    it("drains every worker and the supervisor on SIGTERM: every call in flight answered, exit 0", async () => {
      const [a, b] = await twoWorkers();
      const calls = [a, b, connection(), connection()].map((via) => call("slow", { seconds: 3 }, { via }));
      await running(4);
      process.kill(server.child.pid!, "SIGTERM");
      const answers = await Promise.all(calls);
      for (const { response } of answers) assert.equal(response.status, 200, await response.clone().text());
      const exit = await server.exited;
      assert.equal(exit.code, 0, server.stderr());
      server = await start();
    });

    it("leaves no replica and no worker after kill -9 of the supervisor", async () => {
      const { response } = await call("echo", {});
      assert.equal(response.status, 200);
      const started = await descendants(server.child.pid!);
      assert.ok(started.length >= 3, "two workers and a replica run below the supervisor");
      await server.kill();
      await waitFor(
        async () => (await Promise.all(started.map(stillRunning))).every((live) => !live),
        "every worker and replica to be gone",
        10_000,
      );
    });
  });
}

describe("a host with workers that cannot start", () => {
  it("exits with an error, not a restart loop, when its workers cannot listen (the port is taken)", async () => {
    const taken = createNetServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", () => resolve()));
    const dirs = await makeServerDirs("runplane-workers-port-");
    try {
      const port = String((taken.address() as AddressInfo).port);
      await assert.rejects(
        startServerProcess({ ...dirs.env, RUNPLANE_WORKERS: "2", RUNPLANE_SANDBOX: "off", PORT: port }),
        /exited before it listened[\s\S]*A worker exited before it listened/,
      );
    } finally {
      taken.close();
      await dirs.remove();
    }
  });
});
