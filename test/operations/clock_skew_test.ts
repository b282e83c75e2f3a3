/**
 * One clock: a server process whose host clock is a minute ahead (`RUNPLANE_TEST_CLOCK_OFFSET_MS`) keeps
 * the database's time for what orders and schedules (run ids, created/completed times, a webhook's next
 * attempt, leases) and the monotonic clock for durations: its webhooks leave on time, its run times are
 * true, and its runs' times agree with the database's clock. PostgreSQL only: with SQLite the store's
 * clock is the host's, as there is one host.
 */
import assert from "node:assert/strict";
import { it } from "node:test";
import pg from "pg";
import { verifyWebhook } from "../../client/webhook_verifier.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { createTestDatabase, engines } from "../_helpers/postgres.ts";
import { type AppRef, callRun, getRun, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { makeServerDirs, PROCESS_PROJECT, startServerProcess } from "../_helpers/server_process.ts";
import { eventually, startWebhookReceiver } from "../_helpers/webhook_receiver.ts";

const POSTGRES = (await engines()).includes("postgres");
const OFFSET_MS = 60_000;
/** Generous: a loaded machine is slow, but a minute is far off. */
const MARGIN_MS = 15_000;
const SECRET = "whsec-skew";

/** The time part of a run id (10 base32 digits of Unix ms). */
function runIdTime(runId: string): number {
  const alphabet = "0123456789abcdefghjkmnpqrstvwxyz";
  let time = 0;
  for (const digit of runId.slice(4, 14)) time = time * 32 + alphabet.indexOf(digit);
  return time;
}

it(
  "a process whose clock is a minute ahead: webhooks on time, true run times, run times of the database's clock",
  { skip: !POSTGRES },
  async () => {
    const defer = deferCleanup();
    const database = await createTestDatabase();
    defer(() => database.drop());
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    defer(() => client.end());
    /** The database's clock now, in Unix ms. */
    async function databaseNow(): Promise<number> {
      const { rows } = await client.query<{ now: number }>(
        "select (extract(epoch from clock_timestamp()) * 1000)::float8 as now",
      );
      return rows[0].now;
    }
    const dirs = await makeServerDirs("runplane-skew-");
    defer(() => dirs.remove());
    await dirs.deploy("skew", {
      "runplane.toml": `[deployment]\nname = "skew"\n`,
      "main.py": "import time\n\ndef nap():\n    time.sleep(0.05)\n    return 'rested'\n",
    });
    // Every delivery's first attempt answers 404 (retried after the retry delay), the second 200.
    const seen = new Map<string, number>();
    const receiver = await startWebhookReceiver((_n, request) => {
      const runId = String(request.headers["x-request-id"]);
      seen.set(runId, (seen.get(runId) ?? 0) + 1);
      return seen.get(runId) === 1 ? 404 : 200;
    });
    defer(() => receiver.close());
    const server = await startServerProcess({
      ...dirs.env,
      RUNPLANE_DATABASE_URL: database.url,
      RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1",
      RUNPLANE_WEBHOOK_RETRY_DELAY: "1s",
      RUNPLANE_TEST_CLOCK_OFFSET_MS: String(OFFSET_MS),
    });
    defer(() => server.kill());
    const ref: AppRef = { client: server.client, project: PROCESS_PROJECT, app: "skew" };

    /** Asserts a run's times (and its id's) are the database's, and its run time the function's. */
    async function assertTrueTimes(runId: string): Promise<void> {
      const run = await waitForStatus(ref, runId, ["success"], 60_000);
      const now = await databaseNow();
      for (
        const [name, at] of [
          ["created_at", Date.parse(run.created_at)],
          ["completed_at", Date.parse(run.completed_at!)],
          ["run id", runIdTime(runId)],
        ] as const
      ) {
        assert.ok(at <= now + 1_000 && at > now - MARGIN_MS, `${name} ${at} is the database's time (now ${now})`);
      }
      assert.ok((run.run_time_ms ?? Infinity) < MARGIN_MS, `run_time_ms ${run.run_time_ms} is the function's`);
    }
    /** Waits for the run's webhook: two attempts (a 404, then 200 after the 1 s retry delay), on time. */
    async function assertWebhookOnTime(runId: string, endedAt: number): Promise<void> {
      const requests = await eventually(
        async () => {
          const mine = receiver.requests.filter((r) => r.headers["x-request-id"] === runId);
          return mine.length >= 2 ? mine : undefined;
        },
        45_000,
        `${runId}'s two webhook attempts (not a minute late)`,
      );
      assert.ok(
        requests[1].at - endedAt < MARGIN_MS,
        `the retry arrived ${Math.round(requests[1].at - endedAt)} ms after the run ended`,
      );
      for (const request of requests) {
        const verified = await verifyWebhook({ secret: SECRET, headers: request.headers, body: request.body });
        assert.ok(verified.valid, JSON.stringify(verified));
        const stamp = Number(request.headers["x-runplane-webhook-timestamp"]) * 1000;
        assert.ok(Math.abs(stamp - Date.now()) < MARGIN_MS, `the signature's timestamp ${stamp} is the true time`);
      }
    }

    const { data, response } = await callRun(ref, "nap", { webhookEndpoint: receiver.url, webhookSecret: SECRET });
    const syncEnded = performance.now();
    assert.equal(response.status, 200);
    const answered = data as { run_id: string; run_time_ms: number };
    assert.ok(answered.run_time_ms < MARGIN_MS, `the answer's run_time_ms ${answered.run_time_ms}`);
    await assertTrueTimes(answered.run_id);
    await assertWebhookOnTime(answered.run_id, syncEnded);

    const asyncRun = await submitAsync(ref, "nap", { webhookEndpoint: receiver.url, webhookSecret: SECRET });
    await waitForStatus(ref, asyncRun, ["success"], 60_000);
    const asyncEnded = performance.now();
    await assertTrueTimes(asyncRun);
    await assertWebhookOnTime(asyncRun, asyncEnded);
    const { data: stored } = await getRun(ref, asyncRun);
    assert.ok((stored?.queue_time_ms ?? Infinity) < MARGIN_MS, `queue_time_ms ${stored?.queue_time_ms}`);
  },
);
