/**
 * The dashboard's run page shows a WebSocket run's counters and close (issue 47), the app's close reason
 * (markup, here) as text, and offers no curl for it.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page } from "playwright-core";
import WebSocket from "ws";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { launchBrowser, openPage, signIn } from "../_helpers/browser.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { WEBSOCKET_ECHO_APP } from "../_helpers/websocket_echo_app.ts";

const REASON = "<img src=x onerror=alert(1)>";
const browser = await launchBrowser();

describe(
  "the dashboard's page of a WebSocket run",
  { skip: browser === null ? "Chromium is not installed" : false },
  () => {
    let t: TestServer;
    let context: BrowserContext;
    let page: Page;
    const dialogs: string[] = [];

    before(async () => {
      t = await startTestServer();
      await deployApp(t, "ws", {
        toml: '[deployment]\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n',
        files: { "server.py": WEBSOCKET_ECHO_APP },
      });
      ({ context, page } = await openPage(browser!, dialogs, { server: t }));
    });
    after(async () => {
      await context?.close();
      await browser?.close();
      await t?.close();
    });

    it("shows its messages and bytes each way and the app's close, the reason as text", async () => {
      const socket = new WebSocket(`${t.url.replace("http", "ws")}/v4/${TEST_PROJECT}/ws/chat`, {
        headers: { Authorization: `Bearer ${t.token}` },
      });
      // Every listener is attached before the first await: the greeting may come with the 101.
      const upgraded = new Promise<string>((resolve) =>
        socket.once("upgrade", (response) => resolve(String(response.headers["x-request-id"])))
      );
      const greeted = new Promise((resolve) => socket.once("message", resolve));
      const closed = new Promise((resolve) => socket.once("close", resolve));
      const runId = await upgraded;
      await greeted;
      socket.send(`cmd:close:4000:${REASON}`);
      await closed;
      await waitFor(
        async () =>
          (await t.server.context.runs.getRun({ projectId: TEST_PROJECT, appId: "ws", runId })).status === "success",
        "the run to end",
      );
      await signIn(page, { url: t.url, token: t.token });
      await page.goto(`${t.url}/dashboard/runs/${runId}?app=ws`);
      await page.locator("#websocket-close").waitFor();
      assert.equal(await page.locator("#websocket-close").textContent(), `Closed by the app with 4000: ${REASON}`);
      assert.equal(await page.locator("#websocket-close img").count(), 0, "the reason is not markup");
      const rows = await page.locator("#websocket-traffic tbody tr").allTextContents();
      assert.equal(rows.length, 2);
      assert.match(rows[0], /^Caller → app1\d+$/);
      assert.match(rows[1], /^App → caller1\d+$/);
      assert.equal(await page.locator("#copy-curl").count(), 0);
      assert.deepEqual(dialogs, []);
    });
  },
);
