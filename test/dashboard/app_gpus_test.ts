/**
 * The dashboard's app page shows the app's `[hardware]` and which replica holds which GPU (a fake
 * inventory whose model is markup: shown as text), and its replicas per host (a single process: itself).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page } from "playwright-core";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { launchBrowser, openPage, signIn } from "../_helpers/browser.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MODEL = "<img src=x onerror=alert(1)>";
const browser = await launchBrowser();

describe("the dashboard's app page with GPUs", { skip: browser === null ? "Chromium is not installed" : false }, () => {
  let t: TestServer;
  let context: BrowserContext;
  let page: Page;
  const dialogs: string[] = [];

  before(async () => {
    t = await startTestServer({
      env: { RUNPLANE_GPUS: `GPU-aaa:${MODEL},GPU-bbb`, RUNPLANE_NVIDIA_SMI: "/nonexistent/nvidia-smi" },
    });
    // One replica kept warm: it holds its GPU while idle.
    await deployApp(t, "gpu", {
      toml: "[scaling]\nmin_replicas = 1\n[hardware]\ncpu = 0.5\ngpu_count = 1\n",
      files: { "main.py": "def run():\n    return 1\n" },
    });
    await t.server.context.runtime.warm();
    ({ context, page } = await openPage(browser!, dialogs, { server: t }));
  });
  after(async () => {
    await context?.close();
    await browser?.close();
    await t?.close();
  });

  function readyReplicas(): number {
    const app = t.server.context.runtime.apps(TEST_PROJECT).find((a) => a.name === "gpu");
    return (app?.replicas.idle ?? 0) + (app?.replicas.busy ?? 0);
  }

  function runtimeState(): string {
    const app = t.server.context.runtime.apps(TEST_PROJECT).find((a) => a.name === "gpu");
    const said = t.logs.filter((line) => /app|replica/.test(String(line.msg))).map((line) => line.msg);
    return JSON.stringify({ replicas: app?.replicas, gpus: app?.gpus, said });
  }

  it("lists the app's hardware and its replica's GPU, the model as text", async () => {
    await waitFor(
      () => t.server.context.runtime.apps(TEST_PROJECT).some((a) => a.gpus.length === 1),
      "the warm replica to hold its GPU",
    );
    const [{ pid }] = t.server.context.runtime.apps(TEST_PROJECT).find((a) => a.name === "gpu")!.gpus;
    await signIn(page, { url: t.url, token: t.token });
    await page.goto(`${t.url}/dashboard/apps/gpu`);
    await page.locator("#gpus").waitFor();
    assert.equal(await page.locator("#gpus").textContent(), `pid ${pid}: GPU-aaa (${MODEL})`);
    await page.getByText("0.5 cores, 2 GiB, 1 GPU").waitFor();
    assert.equal(await page.locator("#gpus img").count(), 0, "the model is not markup");
    assert.deepEqual(dialogs, []);
  });

  it("shows the replicas per host: this process alone, marked, with its replica ready and its GPUs", async () => {
    const row = page.locator(`#replica-hosts tr[data-host="${t.server.context.host.id}"]`);
    // The page draws the replicas as the runtime has them when it loads (no live update): load it once the
    // runtime has its replica ready, and again if that replica was replaced in between (a CI pass on a
    // loaded machine once drew no replica at all); a failure tells what the runtime and its log said.
    for (let load = 1;; load++) {
      await waitFor(() => readyReplicas() === 1, "the app's replica to be ready", 60_000);
      await page.goto(`${t.url}/dashboard/apps/gpu`);
      if (await row.waitFor({ timeout: 10_000 }).then(() => true, () => false)) break;
      assert.ok(load < 3, `no replica row after ${load} loads; the runtime: ${runtimeState()}`);
    }
    assert.equal(await page.locator("#replica-hosts tbody tr").count(), 1);
    const cells = await row.locator("td").allTextContents();
    assert.deepEqual(cells, [`${t.server.context.host.id} (this host)`, "0", "1", "0 / 1", "2"]);
    await page.getByRole("heading", { name: "Replicas per host" }).waitFor();
    assert.deepEqual(dialogs, []);
  });
});
