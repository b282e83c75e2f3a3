/**
 * The limits of WebSocket runs (issue 47) through a real server and replica: connections per project
 * (`RUNPLANE_WS_MAX_PER_PROJECT`: 429 before the upgrade) and the idle pings (`RUNPLANE_WS_PING_INTERVAL`:
 * a caller that answers no ping is gone, one that answers stays).
 */
import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { after, before, describe, it } from "node:test";
import WebSocket from "ws";
import type { components } from "../../generated/api.d.ts";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { WEBSOCKET_ECHO_APP } from "../_helpers/websocket_echo_app.ts";
import { openWebSocket, type OpenedWebSocket } from "../_helpers/websockets.ts";

type Run = components["schemas"]["Run"];

const TOML = '[deployment]\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n'
  + "[scaling]\nreplica_concurrency = 10\n";

type Opened = OpenedWebSocket;

describe("the limits of WebSocket runs", () => {
  let t: TestServer;

  function open(options: { autoPong?: boolean } = {}): Promise<Opened> {
    return openWebSocket(`${t.url.replace("http", "ws")}/v4/${TEST_PROJECT}/ws/echo`, {
      headers: { Authorization: `Bearer ${t.token}` },
      autoPong: options.autoPong,
    });
  }

  /** Opens once the project is under its limit again: a connection closed just now frees its place soon after. */
  async function openSoon(options: { autoPong?: boolean } = {}): Promise<Opened> {
    let opened: Opened | undefined;
    await waitFor(
      async () => {
        opened = await open(options).catch((error: Error & { status?: number }) => {
          if (error.status === 429) return undefined;
          throw error;
        });
        return opened !== undefined;
      },
      "a place under the project's WebSocket limit",
      30_000,
    );
    return opened!;
  }

  async function endedRun(runId: string): Promise<Run> {
    let run: Run | undefined;
    await waitFor(
      async () => {
        const response = await checkedFetch(`${t.url}/v4/projects/${TEST_PROJECT}/apps/ws/runs/${runId}`, {
          headers: { Authorization: `Bearer ${t.token}` },
        });
        if (response.status !== 200) return false;
        run = (await response.json()) as Run;
        return run.status !== "running";
      },
      `run ${runId} to end`,
      60_000,
    );
    return run!;
  }

  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_WS_MAX_PER_PROJECT: "2", RUNPLANE_WS_PING_INTERVAL: "1s" } });
    await deployApp(t, "ws", { toml: TOML, files: { "server.py": WEBSOCKET_ECHO_APP } });
  });
  after(async () => {
    await t.close();
  });

  it("refuses a project's connection past its limit with 429 before the upgrade, and takes one again once one closed", async () => {
    const first = await open();
    const second = await open();
    const error = await open().then(
      () => assert.fail("a third connection was accepted"),
      (error: Error & { status: number; response: IncomingMessage }) => error,
    );
    assert.equal(error.status, 429);
    assert.equal(error.response.headers["content-type"], "application/problem+json");
    assert.match((JSON.parse(error.message) as { detail: string }).detail, /\b2\b/);
    first.socket.close(1000);
    await first.closed;
    const third = await openSoon();
    for (const opened of [second, third]) opened.socket.close(1000);
    await Promise.all([second.closed, third.closed]);
  });

  it("keeps a caller that answers pings, and closes one that answers none, its run cancelled", async () => {
    const answering = await openSoon();
    let pings = 0;
    answering.socket.on("ping", () => pings++);
    const silent = await openSoon({ autoPong: false });
    const gone = await silent.closed;
    assert.notEqual(gone.code, 1000, JSON.stringify(gone));
    // Pinged at least twice meanwhile, the answering caller is still open.
    await waitFor(() => pings >= 2, "two pings to the answering caller", 30_000);
    assert.equal(answering.socket.readyState, WebSocket.OPEN);
    const run = await endedRun(silent.runId);
    assert.equal(run.mode, "websocket");
    assert.equal(run.status, "cancelled", JSON.stringify(run));
    answering.socket.close(1000);
    await answering.closed;
  });
});
