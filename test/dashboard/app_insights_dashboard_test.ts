/**
 * The dashboard's app page draws the app's activity (uPlot canvases with the buckets `getAppStats` gave)
 * and tails every run's log live: a run made while the page is open shows its lines, with its run id,
 * and the charts count it without a reload. The page's screenshot is saved in test-results/screenshots/
 * (in docs/ with RUNPLANE_UPDATE_SCREENSHOTS=1), as the other dashboard tests do.
 */
import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page } from "playwright-core";
import { deployApp } from "../_helpers/apps.ts";
import { launchBrowser, openPage, signIn } from "../_helpers/browser.ts";
import { callRun, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MAIN = `import time

def say(word="hi", pause=0.0):
    time.sleep(pause)
    print(f"said {word}", flush=True)
    return word

def fail():
    print("<b>not markup</b>", flush=True)
    raise ValueError("no")
`;

const browser = await launchBrowser();

describe("the dashboard's app page: charts and log tail", {
  skip: browser === null ? "Chromium is not installed" : false,
}, () => {
  let t: TestServer;
  let context: BrowserContext;
  let page: Page;
  const dialogs: string[] = [];
  const ref = () => ({ client: t.client, project: TEST_PROJECT, app: "talk" });

  before(async () => {
    t = await startTestServer();
    await deployApp(t, "talk", { toml: "", files: { "main.py": MAIN } });
    for (let i = 0; i < 4; i++) await callRun(ref(), "say", { body: { word: `w${i}`, pause: i * 0.05 } });
    await callRun(ref(), "fail", { body: {} });
    ({ context, page } = await openPage(browser!, dialogs, { server: t }));
    await page.setViewportSize({ width: 1280, height: 1000 });
    await signIn(page, { url: t.url, token: t.token });
  });
  after(async () => {
    await context?.close();
    await browser?.close();
    await t?.close();
  });

  /** The calls the page's status line counts. */
  async function countedCalls(): Promise<number> {
    const text = (await page.locator("#activity-status").textContent()) ?? "";
    return Number(/^(\d+) call/.exec(text)?.[1] ?? -1);
  }

  /** Whether chart `id`'s canvas has pixels near the colour `hex` (a series drawn). */
  function drawsColour(id: string, hex: string): Promise<boolean> {
    return page.locator(`#${id} canvas`).evaluate((canvas: HTMLCanvasElement, rgb: number[]) => {
      const data = canvas.getContext("2d")!.getImageData(0, 0, canvas.width, canvas.height).data;
      for (let i = 0; i < data.length; i += 4) {
        if (rgb.every((c, k) => Math.abs(data[i + k] - c) < 24)) return true;
      }
      return false;
    }, [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));
  }

  it("draws the four charts from the app's stats, with data", async () => {
    await page.goto(`${t.url}/dashboard/apps/talk`);
    for (const id of ["chart-calls", "chart-latency", "chart-cold-starts", "chart-replicas"]) {
      await page.locator(`#${id} canvas`).waitFor();
      const size = await page.locator(`#${id} canvas`).evaluate((c: HTMLCanvasElement) => [c.width, c.height]);
      assert.ok(size[0] > 200 && size[1] > 100, `${id} canvas is ${size.join("×")}`);
    }
    await page.waitForFunction(() => /^5 calls/.test(document.querySelector("#activity-status")?.textContent ?? ""));
    // The calls chart has pixels of the success colour (#1a7f37) and the failure colour (#cf222e).
    assert.ok(await drawsColour("chart-calls", "#1a7f37"), "the successes' bar is drawn");
    assert.ok(await drawsColour("chart-calls", "#cf222e"), "the failure's bar is drawn");
    assert.ok(await drawsColour("chart-latency", "#2456c4"), "the p50 point is drawn");
    assert.ok(await drawsColour("chart-latency", "#8250df"), "the p95 point is drawn");
    assert.deepEqual(dialogs, []);
  });

  it("tails every run's log live, each line with its run id, text never markup", async () => {
    await page.locator("#app-log .tail-line").first().waitFor();
    assert.equal(await page.locator("#app-log b").count(), 0, "a line is shown as text");
    await page.locator("#app-log").getByText("<b>not markup</b>").waitFor();
    const before = await countedCalls();
    const runId = await submitAsync(ref(), "say", { body: { word: "live" } });
    const line = page.locator(`#app-log .tail-line[data-run="${runId}"]`);
    await line.waitFor();
    assert.match((await line.textContent()) ?? "", new RegExp(`${runId} said live$`));
    await waitForStatus(ref(), runId, ["success"]);
    // The charts are read again while the page is open: the new call is counted without a reload.
    await page.waitForFunction(
      (n) => Number(/^(\d+) call/.exec(document.querySelector("#activity-status")?.textContent ?? "")?.[1]) > n,
      before,
    );
    // The host samples its replicas every few seconds, and the page reads the charts again as often.
    for (const [id, hex] of [["chart-replicas", "#0969da"], ["chart-cold-starts", "#bc4c00"]]) {
      while (!(await drawsColour(id, hex))) await page.waitForTimeout(500);
    }
    const shots = process.env.RUNPLANE_UPDATE_SCREENSHOTS === "1" ? "docs" : join("test-results", "screenshots");
    const dir = join(import.meta.dirname, "..", "..", shots);
    await mkdir(dir, { recursive: true });
    await page.screenshot({ path: join(dir, "dashboard-app-activity.png"), fullPage: true });
  });

  it("switches to the last day's 15-minute buckets", async () => {
    await page.getByRole("button", { name: "Last day" }).click();
    await page.waitForFunction(() => /per 15 min/.test(document.querySelector("#activity-status")?.textContent ?? ""));
    await page.locator("#chart-calls canvas").waitFor();
    assert.equal(await page.getByRole("button", { name: "Last day" }).getAttribute("aria-pressed"), "true");
  });
});
