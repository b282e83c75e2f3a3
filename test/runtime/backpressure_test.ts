import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { makeServerDirs, type ServerDirs, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";

const PROJECT = "p-demo";

const MAIN = `
def flood(progress, count=200, size=1048576):
    item = "x" * size
    for i in range(count):
        with open(progress, "w") as f:
            f.write(str(i))
        yield item

def huge(size=50000000):
    return "y" * size
`;

/** The server's resident set size in bytes, from /proc. */
function rss(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(match![1]) * 1024;
}

const MiB = 1024 * 1024;

describe("streams and big results are read without holding or stalling the server", () => {
  let server: ServerProcess;
  let dirs: ServerDirs;
  before(async () => {
    dirs = await makeServerDirs("runplane-backpressure-");
    // Two apps, so that each test has its own worker.
    for (const app of ["big", "results"]) {
      await dirs.deploy(app, {
        "runplane.toml": "[scaling]\nmax_replicas = 1\nreplica_concurrency = 2\nresponse_grace_period = 120\n",
        "main.py": MAIN,
      });
    }
    // The functions write marker files the test reads back: a jailed app cannot (test/sandbox/ covers the jail).
    server = await startServerProcess({ ...dirs.env, RUNPLANE_SANDBOX: "off" });
  });
  after(async () => {
    await server.kill();
    await dirs.remove();
  });

  function post(fn: string, body: unknown, app = "big"): Promise<Response> {
    return fetch(`${server.url}/v4/${PROJECT}/${app}/${fn}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  }

  it("a stalled reader of a 200 MB stream holds the server's memory and the generator waits", async () => {
    const progress = join(dirs.root, "progress");
    // Warm up: a short stream read to the end, so the baseline includes the code paths used.
    const warm = await post("flood", { progress, count: 4 });
    assert.equal(warm.status, 200);
    await warm.text();
    await sleep(500);
    const baseline = rss(server.child.pid!);
    const url = new URL(`/v4/${PROJECT}/big/flood`, server.url);
    const stalled = request(url, {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
    });
    const response = await new Promise<import("node:http").IncomingMessage>((resolve, reject) => {
      stalled.once("response", resolve);
      stalled.once("error", reject);
      stalled.end(JSON.stringify({ progress, count: 200 }));
    });
    assert.equal(response.statusCode, 200);
    // The client reads nothing from here on.
    response.pause();
    await sleep(4000);
    const reached = Number(readFileSync(progress, "utf8"));
    let peak = rss(server.child.pid!);
    await sleep(2000);
    peak = Math.max(peak, rss(server.child.pid!));
    const later = Number(readFileSync(progress, "utf8"));
    stalled.destroy();
    console.log(
      `generator reached item ${reached}, then ${later}; server RSS ${baseline / MiB} MiB -> ${peak / MiB} MiB`,
    );
    assert.ok(reached < 100, `the generator ran ahead of a stalled reader to item ${reached} of 200`);
    assert.equal(later, reached, "the generator waits while the reader does not read");
    assert.ok(peak - baseline < 64 * MiB, `server RSS grew by ${(peak - baseline) / MiB} MiB`);
  });

  /** Samples GET /healthz every 10 ms while `during` runs; resolves with the latencies in ms. */
  async function healthzDuring(during: () => Promise<void>): Promise<number[]> {
    const latencies: number[] = [];
    let done = false;
    const sampler = (async () => {
      while (!done) {
        const started = performance.now();
        const answer = await fetch(`${server.url}/healthz`);
        await answer.arrayBuffer();
        latencies.push(performance.now() - started);
        await sleep(10);
      }
    })();
    try {
      await during();
    } finally {
      done = true;
      await sampler;
    }
    return latencies;
  }

  // A 50 MB result arrives as a header and a raw JSON payload that the server checks a slice per turn
  // and hands through unparsed, and the answer is written a MiB per turn (measured on the shared 2-core
  // test machine: /healthz max 250-650 ms before, 16-70 ms after, 7-40 ms with 10-byte results). That
  // machine runs other suites at the same time, so its own scheduling stalls show up in any probe: the
  // bound is a margin (see the test) above the worst /healthz latency of the same probe during the same kind of work with
  // a 10-byte result, measured right before. A neighbouring suite's burst can land in one measurement and
  // not the other, so a round that misses the bound is measured again, up to three rounds; the server
  // before the fix missed it in every round.
  /** One round: the worst /healthz latency during a 50 MB call, and during calls with 10-byte results. */
  async function measureRound(): Promise<{ worst: number; baseline: number; took: number }> {
    const tiny = await healthzDuring(async () => {
      const until = performance.now() + 1500;
      while (performance.now() < until) {
        const small = await post("huge", { size: 10 }, "results");
        const text = await small.text();
        assert.equal(small.status, 200, text);
      }
    });
    const baseline = Math.max(...tiny);
    let answer!: Response;
    let size = 0;
    let head = "";
    let tail = "";
    let took = 0;
    const latencies = await healthzDuring(async () => {
      const started = performance.now();
      answer = await post("huge", {}, "results");
      // The body is counted, not decoded: parsing 50 MB here would stall this process's own sampler.
      const reader = answer.body!.getReader();
      for (let next = await reader.read(); !next.done; next = await reader.read()) {
        if (size === 0) head = Buffer.from(next.value.subarray(0, 128)).toString();
        size += next.value.length;
        tail = Buffer.from(next.value.subarray(-16)).toString();
      }
      took = performance.now() - started;
    });
    assert.equal(answer.status, 200);
    assert.ok(size > 50_000_000 && size < 50_000_100, `the answer has ${size} bytes`);
    const runId = answer.headers.get("X-Request-Id")!;
    assert.match(head, new RegExp(`^\\{"run_id":"${runId}","run_time_ms":[0-9.]+,"result":"yyyy`));
    assert.match(tail, /y"\}$/);
    // Answered whole, stored truncated (RUNPLANE_RESULT_LIMIT, 1 MiB by default).
    const { data: run } = await server.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
      params: { path: { project_id: PROJECT, app_id: "results", run_id: runId } },
    });
    assert.equal(run?.status, "success");
    assert.equal(run?.result, null);
    assert.equal(run?.result_truncated, true);
    const worst = Math.max(...latencies);
    console.log(
      `50 MB result in ${Math.round(took)} ms; /healthz max ${Math.round(worst)} ms over ${latencies.length}`
        + ` (with 10-byte results: max ${Math.round(baseline)} ms over ${tiny.length})`,
    );
    assert.ok(latencies.length >= 5, "/healthz was sampled during the call");
    return { worst, baseline, took };
  }

  it("a 50 MB result keeps /healthz answering quickly while it is read", async () => {
    const rounds: string[] = [];
    for (let round = 1; round <= 3; round++) {
      const { worst, baseline, took } = await measureRound();
      // The margin: 400 ms (a loaded CI host added 170–230 ms to every round), or a quarter of the time
      // the result took, whichever is more. A loaded machine slows the whole call, and the margin with
      // it; a server that held its loop over the result stalls for most of that time whatever the load.
      const margin = Math.max(400, took / 4);
      rounds.push(`${Math.round(worst)} ms (baseline ${Math.round(baseline)} ms, margin ${Math.round(margin)} ms)`);
      if (worst < baseline + margin) return;
    }
    assert.fail(
      `/healthz stalled past its margin above its baseline while a 50 MB result was read: ${rounds.join(", ")}`,
    );
  });
});
