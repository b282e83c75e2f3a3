/**
 * A host with workers when its PostgreSQL goes away (issue 33 with issue 28's standard: a store outage is
 * a 503, never a crash): a scrape of `/metrics` through any worker, which gathers every process's registry
 * (and the queued-runs gauge reads the store), answers, and no process of the host dies.
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { Agent } from "undici";
import { alive, waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { type OwnPostgres, ownPostgresMissing, startOwnPostgres } from "../_helpers/own_postgres.ts";
import { descendants } from "../_helpers/process_tree.ts";
import { makeServerDirs, type ServerDirs, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";

const MISSING = await ownPostgresMissing();

describe("a host with two workers when its PostgreSQL goes away", { skip: MISSING ?? false }, () => {
  let postgres: OwnPostgres;
  let dirs: ServerDirs;
  let server: ServerProcess;

  before(async () => {
    postgres = await startOwnPostgres();
    dirs = await makeServerDirs("runplane-workers-outage-");
    server = await startServerProcess({
      ...dirs.env,
      RUNPLANE_DATABASE_URL: postgres.url,
      RUNPLANE_WORKERS: "2",
      RUNPLANE_SANDBOX: "off",
    });
  });
  after(async () => {
    await server?.kill();
    await postgres?.remove();
    await dirs?.remove();
  });

  /** The host's Node processes: the supervisor and its workers. */
  async function nodeProcesses(): Promise<number[]> {
    const tree = await descendants(server.child.pid!);
    const node = await Promise.all(tree.map(async (p) => {
      const command = await readFile(`/proc/${p.pid}/cmdline`, "utf8").catch(() => "");
      return command.split("\0")[0] === process.execPath ? [p.pid] : [];
    }));
    return [server.child.pid!, ...node.flat()];
  }

  /** `/metrics` through a new connection (dealt to the next worker): its status and which worker answered. */
  async function scrape(): Promise<{ status: number; worker: string }> {
    const response = await checkedFetch(`${server.url}/metrics`, {
      dispatcher: new Agent({ connections: 1 }),
    } as RequestInit);
    await response.text();
    return { status: response.status, worker: response.headers.get("x-runplane-worker") ?? "" };
  }

  it("answers scrapes through both workers with 200 or 503 while the store is away, and loses no process", async () => {
    const processes = await nodeProcesses();
    assert.equal(processes.length, 3, `a supervisor and two workers: ${processes}`);
    assert.equal((await scrape()).status, 200);
    await postgres.stop();
    try {
      const workers = new Set<string>();
      for (let i = 0; i < 8; i++) {
        const { status, worker } = await scrape();
        assert.ok(status === 200 || status === 503, `scrape ${i}: ${status}`);
        workers.add(worker);
      }
      assert.deepEqual([...workers].sort(), ["1", "2"], "both workers were scraped");
      for (const pid of processes) assert.ok(alive(pid), `process ${pid} of the host is alive`);
    } finally {
      await postgres.start();
    }
    await waitFor(async () => (await scrape()).status === 200, "scrapes to answer 200 again", 30_000);
    assert.deepEqual(await nodeProcesses(), processes, "the same processes serve");
  });
});
