/**
 * A full disk under the SQLite store: the data dir is a small tmpfs of the test's own (mounting one
 * needs root: without it the test skips loudly, and fails where `RUNPLANE_TEST_REQUIRE_ROOT=1`, as in
 * `.ci/run` run as root). While it is full, calls answer 503 `store-unavailable` (never 500) and
 * `/readyz` is not ready; once space is back, every run that was accepted succeeds and its webhook
 * arrives, and a sync call answered 200 while it was full is recorded `success`. The outage is logged
 * once when it starts and once when it ends (no flap while still full), its end counting exactly the
 * 503s answered, and the WAL checkpoint worker, failed on the full disk, says when it is back.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { userInfo } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { promisify } from "node:util";
import { createTestClient } from "../_helpers/client.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { type AppRef, callRun, getRun } from "../_helpers/runs.ts";
import { makeServerDirs, PROCESS_PROJECT, startServerProcess } from "../_helpers/server_process.ts";
import { eventually, startWebhookReceiver } from "../_helpers/webhook_receiver.ts";

const run = promisify(execFile);

function rootMissing(): string | null {
  if (userInfo().uid === 0) return null;
  const message = "mounting the test's small tmpfs needs root";
  if (process.env.RUNPLANE_TEST_REQUIRE_ROOT === "1") throw new Error(`${message}, and RUNPLANE_TEST_REQUIRE_ROOT=1`);
  console.error(`\n*** SKIPPED the full-disk test: ${message}.\n`);
  return message;
}

const MISSING = rootMissing();

/** Writes zeros to `path` until the file system is full. */
async function fill(path: string): Promise<void> {
  const out = createWriteStream(path);
  const chunk = Buffer.alloc(64 * 1024);
  await new Promise<void>((resolve) => {
    out.on("error", () => resolve());
    const write = () => {
      while (out.write(chunk));
      out.once("drain", write);
    };
    write();
  });
  out.destroy();
}

const MAIN_PY = `def echo(x=0):\n    return {"x": x, "pad": "p" * 2000}\n`;

it(
  "a full disk under SQLite: 503 store-unavailable and not ready while full, every accepted run succeeds once space is back",
  {
    skip: MISSING ?? false,
  },
  async () => {
    const defer = deferCleanup();
    const dirs = await makeServerDirs("runplane-full-disk-");
    defer(() => dirs.remove());
    const mount = join(dirs.root, "small");
    await mkdir(mount);
    await run("mount", ["-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", mount]);
    defer(() => run("umount", ["-l", mount]));
    const receiver = await startWebhookReceiver();
    defer(() => receiver.close());
    await dirs.deploy("e", { "runplane.toml": `[deployment]\nname = "e"\n`, "main.py": MAIN_PY });
    const server = await startServerProcess({
      ...dirs.env,
      RUNPLANE_DATA_DIR: join(mount, "data"),
      RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1",
      RUNPLANE_WEBHOOK_RETRY_DELAY: "1s",
      // The test is about the store; the jail's own tests are in test/sandbox/.
      RUNPLANE_SANDBOX: "off",
    });
    defer(() => server.kill());
    const ref: AppRef = { client: server.client, project: PROCESS_PROJECT, app: "e" };
    const warm = await callRun(ref, "echo", { body: { x: -1 } });
    assert.equal(warm.response.status, 200);

    const filler = join(mount, "filler");
    await fill(filler);
    const statuses = new Map<number, number>();
    const accepted: string[] = [];
    const problems: string[] = [];
    let readyWhileFull: number | undefined;
    for (let i = 0; i < 300; i++) {
      const { data, error, response } = await callRun(ref, "echo", {
        async: true,
        webhookEndpoint: receiver.url,
        body: { x: i },
      });
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
      if (response.status === 202) accepted.push((data as { run_id: string }).run_id);
      else if (response.status !== 503 || !String(error?.type).endsWith("/store-unavailable")) {
        problems.push(`${response.status} ${error?.type}: ${error?.detail}`);
      } else if (readyWhileFull === undefined) {
        assert.ok(response.headers.get("retry-after"), "a store-unavailable 503 says when to retry");
        const ready = await createTestClient(server.url).GET("/readyz");
        readyWhileFull = ready.response.status;
        assert.match(ready.error?.detail ?? "", /store cannot write/);
      }
    }
    // A sync call while the disk is full is refused before its function runs, or recorded as answered.
    const answered: string[] = [];
    for (let i = 0; i < 20; i++) {
      const { error, response } = await callRun(ref, "echo", { body: { x: i } });
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
      if (response.status === 200) answered.push(response.headers.get("x-request-id")!);
      else if (response.status !== 503 || !String(error?.type).endsWith("/store-unavailable")) {
        problems.push(`sync ${response.status} ${error?.type}: ${error?.detail}`);
      }
    }
    console.error(`full disk: ${JSON.stringify(Object.fromEntries(statuses))}`);
    assert.deepEqual(problems.slice(0, 5), [], "answers other than 202 and 503 store-unavailable while full");
    assert.ok((statuses.get(503) ?? 0) > 0, "the full disk refused calls");
    assert.equal(readyWhileFull, 503, "/readyz is not ready while the disk is full");

    await rm(filler);
    await eventually(
      async () => (await createTestClient(server.url).GET("/readyz")).response.status === 200 ? true : undefined,
      30_000,
      "/readyz to be ready once space is back",
    );
    // One outage, told twice: the probe's small write fitting on the full disk did not end it early.
    const outageLines = server.logs.filter((line) => /^store (unavailable|available again)/.test(String(line.msg)));
    assert.deepEqual(
      outageLines.map((line) => String(line.msg).split(":")[0]),
      ["store unavailable", "store available again"],
      JSON.stringify(outageLines),
    );
    assert.equal(outageLines[1].refused, statuses.get(503), "the end counts the 503s answered");
    if (server.logs.some((line) => /checkpoint worker failed/.test(String(line.msg)))) {
      await eventually(
        async () =>
          server.logs.some((line) => /checkpoint worker checkpoints again/.test(String(line.msg))) || undefined,
        30_000,
        "the checkpoint worker to say it is back",
      );
    }
    for (const runId of answered) {
      const record = await eventually(
        async () => {
          const { data } = await getRun(ref, runId);
          return data && data.status !== "running" ? data : undefined;
        },
        60_000,
        `sync run ${runId}'s record`,
      );
      assert.equal(record.status, "success", `sync run ${runId} answered 200 is recorded ${record.status}`);
    }
    for (const runId of accepted) {
      const record = await eventually(
        async () => {
          const { data } = await getRun(ref, runId);
          return data && ["success", "failure", "cancelled"].includes(data.status) ? data : undefined;
        },
        60_000,
        `run ${runId} to end`,
      );
      assert.equal(record.status, "success", `accepted run ${runId} ended ${record.status} (${record.error?.type})`);
    }
    await eventually(
      async () => {
        const delivered = new Set(receiver.requests.map((request) => String(request.headers["x-request-id"])));
        return accepted.every((id) => delivered.has(id)) ? true : undefined;
      },
      60_000,
      "every accepted run's webhook",
    );
    assert.equal(server.child.exitCode, null, `the server exited: ${server.stderr().slice(-2000)}`);
  },
);
