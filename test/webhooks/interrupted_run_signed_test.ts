/**
 * A sync or stream run cut off by its process (the drain timeout, kill -9) ends `failure`/`interrupted`
 * through whoever ends it (the stopping process itself, a restarted one, another one sharing the
 * store): its webhook is signed with the secret the call gave, and so is a redelivery of it. A verifying
 * receiver refuses an unsigned delivery (401, not retried), so an unsigned one is a lost one.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Agent, fetch } from "undici";
import { verifyWebhook } from "../../client/webhook_verifier.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { assertMatchesContract } from "../_helpers/contract.ts";
import { createTestDatabase, engines, TEST_MASTER_KEY } from "../_helpers/postgres.ts";
import { type AppRef, getRun, listRuns } from "../_helpers/runs.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startServerProcess,
} from "../_helpers/server_process.ts";
import { eventually, type ReceivedRequest, startWebhookReceiver } from "../_helpers/webhook_receiver.ts";

const SECRET = "whsec-interrupted";
const MAIN = `import time

def stuck():
    time.sleep(600)
    return "never"

def drip():
    yield "first"
    time.sleep(600)
    yield "never"
`;

/** A receiver that checks signatures as a careful one does: 401 for a delivery that does not verify. */
async function verifyingReceiver() {
  const verdicts: Array<{ request: ReceivedRequest; valid: boolean; reason?: string }> = [];
  const receiver = await startWebhookReceiver(() => 200);
  async function verdictsFor(runIds: string[], count: number) {
    await eventually(
      async () => {
        const mine = receiver.requests.filter((r) => runIds.includes(String(r.headers["x-request-id"])));
        return mine.length >= count ? true : undefined;
      },
      90_000,
      `${count} webhook requests for ${runIds.join(", ")}`,
    );
    for (const request of receiver.requests.slice(verdicts.length)) {
      const verified = await verifyWebhook({ secret: SECRET, headers: request.headers, body: request.body });
      verdicts.push({ request, valid: verified.valid, reason: verified.valid ? undefined : verified.reason });
    }
    return verdicts.filter((v) => runIds.includes(String(v.request.headers["x-request-id"])));
  }
  return { receiver, verdictsFor };
}

/** One data dir (and database) with the app; the processes started on it, killed after the test. */
async function setUp(engine: string, defer: (step: () => unknown) => void, prefix: string) {
  const database = engine === "postgres" ? await createTestDatabase() : null;
  if (database) defer(() => database.drop());
  const dirs: ServerDirs[] = [];
  async function newDirs(): Promise<ServerDirs> {
    const made = await makeServerDirs(prefix);
    defer(() => made.remove());
    await made.deploy("cut", { "runplane.toml": `[deployment]\nname = "cut"\n`, "main.py": MAIN });
    dirs.push(made);
    return made;
  }
  await newDirs();
  const { receiver, verdictsFor } = await verifyingReceiver();
  defer(() => receiver.close());
  const agent = new Agent({ keepAliveTimeout: 1, keepAliveMaxTimeout: 1 });
  defer(() => agent.close());
  function env(on: ServerDirs, extra: Record<string, string> = {}): Record<string, string> {
    return {
      ...on.env,
      ...(database ? { RUNPLANE_DATABASE_URL: database.url, RUNPLANE_MASTER_KEY: TEST_MASTER_KEY } : {}),
      RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1",
      ...extra,
    };
  }
  async function start(on: ServerDirs, extra: Record<string, string> = {}, token?: string): Promise<ServerProcess> {
    const server = await startServerProcess(env(on, extra), { token });
    defer(() => server.kill());
    return server;
  }
  /** Starts a sync call and a stream call with the webhook; resolves with their run ids once both run. */
  async function startCalls(server: ServerProcess): Promise<{ sync: string; stream: string }> {
    const call = (fn: string) =>
      fetch(`${server.url}/v4/${PROCESS_PROJECT}/cut/${fn}?webhookEndpoint=${encodeURIComponent(receiver.url)}`, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${server.token}`,
          "Content-Type": "application/json",
          "X-Webhook-Secret": SECRET,
        },
        body: "{}",
        dispatcher: agent,
      });
    const stream = await call("drip");
    await assertMatchesContract("POST", `${server.url}/v4/${PROCESS_PROJECT}/cut/drip`, stream as unknown as Response);
    assert.equal(stream.status, 200);
    const streamId = stream.headers.get("x-request-id")!;
    const reader = stream.body!.getReader();
    let seen = "";
    while (!seen.includes("first")) {
      const { value, done } = await reader.read();
      assert.ok(!done, `the stream ended early: ${seen}`);
      seen += Buffer.from(value).toString();
    }
    // The sync call answers only when it ends (never, here): its run id comes from the run list.
    void call("stuck").then((r) => r.body?.cancel(), () => {});
    const ref: AppRef = { client: server.client, project: PROCESS_PROJECT, app: "cut" };
    const sync = await eventually(
      async () => {
        const { data } = await listRuns(ref, { status: "running" });
        return data?.runs.find((r) => r.function_name === "stuck")?.run_id;
      },
      60_000,
      "the sync call to be recorded running",
    );
    // Neither is answered; the stream's connection stays open until its process goes.
    void reader.closed.catch(() => {});
    return { sync, stream: streamId };
  }
  /** Redelivers `runId`'s webhook once its delivery settled; resolves once the redelivery arrived. */
  async function redeliver(server: ServerProcess, runId: string): Promise<void> {
    const ref: AppRef = { client: server.client, project: PROCESS_PROJECT, app: "cut" };
    await eventually(
      async () => {
        const { data } = await getRun(ref, runId);
        return data?.webhook?.status === "delivered" ? true : undefined;
      },
      60_000,
      `${runId}'s delivery to settle`,
    );
    const before = receiver.requests.length;
    const { response } = await server.client.POST(
      "/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/webhook/redeliver",
      { params: { path: { project_id: PROCESS_PROJECT, app_id: "cut", run_id: runId } } },
    );
    assert.equal(response.status, 200);
    await receiver.waitFor(before + 1, 60_000);
  }
  /** Waits for at least `count` deliveries of `runIds`; asserts every one so far verifies and says interrupted. */
  async function assertSigned(runIds: string[], count: number): Promise<void> {
    const verdicts = await verdictsFor(runIds, count);
    for (const { request, valid, reason } of verdicts) {
      assert.ok(valid, `the delivery of ${request.headers["x-request-id"]} is not signed: ${reason}`);
      const body = JSON.parse(request.body.toString()) as { status: string; error: { type: string } | null };
      assert.equal(body.status, "failure");
      assert.equal(body.error?.type, "interrupted");
    }
  }
  return { dirs, newDirs, start, startCalls, redeliver, assertSigned };
}

for (const engine of await engines()) {
  describe(`an interrupted sync or stream run's webhook is signed (${engine})`, () => {
    it("kill -9: ended interrupted by a restarted process (SQLite) or another one after the lease (PostgreSQL); its redelivery is signed too", async () => {
      const defer = deferCleanup();
      const t = await setUp(engine, defer, "runplane-signed-kill-");
      const lease = { RUNPLANE_RUN_LEASE: "2s" };
      const first = await t.start(t.dirs[0], lease);
      const { sync, stream } = await t.startCalls(first);
      await first.kill();
      // SQLite: the restart on the same data dir finds the dead process's runs by its pid. PostgreSQL:
      // a process elsewhere (its own data dir) ends them when their lease has run out.
      const second = engine === "postgres"
        ? await t.start(await t.newDirs(), lease, first.token)
        : await t.start(t.dirs[0], lease, first.token);
      await t.assertSigned([sync, stream], 2);
      await t.redeliver(second, sync);
      await t.assertSigned([sync, stream], 3);
    });

    it("drain timeout: ended interrupted by the stopping process itself; its redelivery is signed too", async () => {
      const defer = deferCleanup();
      const t = await setUp(engine, defer, "runplane-signed-drain-");
      const first = await t.start(t.dirs[0], { RUNPLANE_DRAIN_TIMEOUT: "500ms" });
      const { sync, stream } = await t.startCalls(first);
      first.child.kill("SIGTERM");
      assert.equal((await first.exited).code, 0);
      // The stopping process may not have delivered before it closed: the next one delivers what is due.
      const second = await t.start(t.dirs[0], {}, first.token);
      await t.assertSigned([sync, stream], 2);
      await t.redeliver(second, stream);
      await t.assertSigned([sync, stream], 3);
    });
  });
}
