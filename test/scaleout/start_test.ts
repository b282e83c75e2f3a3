/** Ten processes started at once on an empty PostgreSQL database: one migrates, all become ready. */
import assert from "node:assert/strict";
import { it } from "node:test";
import pg from "pg";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { createTestDatabase, engines, TEST_MASTER_KEY } from "../_helpers/postgres.ts";
import { makeServerDirs, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const POSTGRES = (await engines()).includes("postgres");

it("ten processes started at once on an empty database all become ready (/readyz 200), with one set of keys", {
  skip: !POSTGRES,
}, async () => {
  const defer = deferCleanup();
  const database = await createTestDatabase();
  defer(() => database.drop());
  const dirs = await Promise.all(Array.from({ length: 10 }, (_, i) => makeServerDirs(`runplane-start-${i}-`)));
  defer(() => Promise.all(dirs.map((d) => d.remove())));
  const servers: ServerProcess[] = [];
  defer(() => Promise.all(servers.map((s) => s.kill())));
  const starts = await Promise.allSettled(dirs.map((d) =>
    startServerProcess(
      // Pools of 3: ten processes (and a listening session each) beside the other test files' stores stay
      // well under PostgreSQL's 100 connections ("too many clients" failed this test once).
      {
        ...d.env,
        RUNPLANE_DATABASE_URL: database.url,
        RUNPLANE_MASTER_KEY: TEST_MASTER_KEY,
        RUNPLANE_DATABASE_POOL: "3",
      },
      // Only the process that created the schema prints a demo token: the others need none to listen.
      { token: "none" },
    ).then((server) => (servers.push(server), server))
  ));
  for (const start of starts) assert.equal(start.status, "fulfilled", String((start as PromiseRejectedResult).reason));
  assert.equal(servers.length, 10);
  for (const server of servers) {
    await eventually(
      async () => ((await fetch(`${server.url}/readyz`)).status === 200 ? true : undefined),
      60_000,
      `${server.url} to be ready`,
    );
  }
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    const keys = await client.query(`select "purpose", count(*)::int as "n" from "keys" group by "purpose"`);
    assert.deepEqual(
      Object.fromEntries(keys.rows.map((row) => [row.purpose, row.n])),
      { data: 1, signing: 1 },
    );
  } finally {
    await client.end();
  }
});
