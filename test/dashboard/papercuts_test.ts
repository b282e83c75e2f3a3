/**
 * The dashboard's papercuts (issue 51), in Chromium: Activate and Cancel ask first (dismissed, nothing
 * happens; accepted, it does); "Find a run by id" sits above the runs table; on a phone (390×844) no
 * button's words break inside the deployments table (a screenshot is saved to look at); no page logs a 404
 * (the favicon is inline); counts read "1 core", "1 replica".
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page } from "playwright-core";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { launchBrowser, newContext } from "../_helpers/browser.ts";
import { runMain } from "../_helpers/cli.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const SHOTS = join(import.meta.dirname, "..", "..", "test-results", "screenshots");

const browser = await launchBrowser();

describe("the dashboard's papercuts", { skip: browser === null ? "Chromium is not installed" : false }, () => {
  let t: TestServer;
  let admin: string;
  let context: BrowserContext;
  let page: Page;
  let root: string;
  /** What the next confirm() gets. */
  let answer: "accept" | "dismiss" = "dismiss";
  const dialogs: string[] = [];
  /** Every answer the pages got with status 404, and every console error about one. */
  const failures: string[] = [];

  async function api(path: string, init: RequestInit = {}): Promise<Response> {
    return await fetch(`${t.url}${path}`, {
      ...init,
      headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
    });
  }

  async function deployments(): Promise<Array<{ deployment_id: string; active: boolean }>> {
    const answer = await api(`/v3/projects/${TEST_PROJECT}/apps/svc/deployments`);
    return ((await answer.json()) as { deployments: Array<{ deployment_id: string; active: boolean }> }).deployments;
  }

  async function newPage(viewport: { width: number; height: number }): Promise<void> {
    await context?.close();
    context = await newContext(browser!, { viewport, server: t });
    page = await context.newPage();
    page.on("dialog", (dialog) => {
      dialogs.push(`${dialog.type()}: ${dialog.message()}`);
      void (dialog.type() === "confirm" && answer === "accept" ? dialog.accept() : dialog.dismiss());
    });
    page.on("response", (response) => {
      if (response.status() === 404) failures.push(`404 ${response.url()}`);
    });
    page.on("console", (message) => {
      // (The sign-in page's 401s, before a session, are expected.)
      if (message.type() === "error" && /\b404\b/.test(message.text())) failures.push(`console: ${message.text()}`);
    });
    await page.goto(`${t.url}/dashboard/signin`);
    await page.getByLabel("Service-account token").fill(admin);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Runs" }).waitFor();
  }

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-papercuts-"));
    await mkdir(SHOTS, { recursive: true });
    t = await startTestServer();
    admin = (await t.mintToken({ scopes: ["admin", "deploy", "rest", "run"] })).token;
    await deployApp(t, "sleeper", {
      toml: "[scaling]\nmax_replicas = 1\nreplica_concurrency = 1\n\n[hardware]\ncpu = 1\nmemory = 1\n",
      files: { "main.py": "import time\n\ndef run(seconds=0):\n    time.sleep(seconds)\n    return {}\n" },
    });
    const env = { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: admin };
    for (const version of ["1", "2"]) {
      const dir = join(root, `v${version}`);
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, "runplane.toml"), `[deployment]\nname = "svc"\n`);
      await writeFile(join(dir, "main.py"), `def run():\n    return {"v": "${version}"}\n`);
      const outcome = await runMain(["deploy", dir, "--message", `version ${version}`], { env });
      assert.equal(outcome.code, 0, outcome.stderr + outcome.stdout);
    }
    await newPage({ width: 1280, height: 860 });
  });
  after(async () => {
    await context?.close();
    await browser?.close();
    await t?.close();
    await rm(root, { recursive: true, force: true });
  });

  it("asks before activating a deployment: dismissed, nothing changes; accepted, it is active", async () => {
    const [newest, older] = await deployments();
    assert.equal(newest.active, true);
    await page.goto(`${t.url}/dashboard/apps/svc`);
    const row = page.locator(`#deployments tr[data-deployment="${older.deployment_id}"]`);
    answer = "dismiss";
    await row.getByRole("button", { name: "Activate" }).click();
    await waitFor(() => dialogs.some((d) => d.startsWith(`confirm: Activate ${older.deployment_id}?`)), "the question");
    // The page sends nothing after a dismissed question: the deployment stays inactive.
    assert.equal((await deployments()).find((d) => d.active)?.deployment_id, newest.deployment_id);
    answer = "accept";
    await row.getByRole("button", { name: "Activate" }).click();
    await page.locator(`#deployments tr[data-deployment="${older.deployment_id}"]`).getByText("(active)").waitFor();
    assert.equal((await deployments()).find((d) => d.active)?.deployment_id, older.deployment_id);
  });

  it("asks before cancelling a run: dismissed, it runs on; accepted, it is cancelled", async () => {
    const made = await api(`/v4/${TEST_PROJECT}/sleeper/run?async=true`, {
      method: "POST",
      body: JSON.stringify({ seconds: 60 }),
    });
    const { run_id: runId } = (await made.json()) as { run_id: string };
    await waitFor(
      async () => {
        await page.goto(`${t.url}/dashboard/runs/${runId}?app=sleeper`);
        await page.locator("#run-id").waitFor();
        return (await page.locator("#status").innerText()) === "running";
      },
      "the run to start",
      60_000,
    );
    answer = "dismiss";
    await page.getByRole("button", { name: "Cancel run" }).click();
    await waitFor(() => dialogs.some((d) => d.startsWith(`confirm: Cancel ${runId}?`)), "the question");
    const status = async () =>
      ((await (await api(`/v4/projects/${TEST_PROJECT}/apps/sleeper/runs/${runId}`)).json()) as { status: string })
        .status;
    assert.equal(await status(), "running");
    answer = "accept";
    await page.getByRole("button", { name: "Cancel run" }).click();
    await page.locator("#status", { hasText: "cancelled" }).waitFor();
    assert.equal(await status(), "cancelled");
  });

  it("puts Find a run by id above the runs table", async () => {
    await page.goto(`${t.url}/dashboard/runs`);
    // The runs page re-renders as it re-reads (live), so an element read between two renders has no box:
    // read both boxes again until both are on the page.
    const boxes = async () => {
      await page.getByLabel("Find a run by id").waitFor();
      await page.locator("#runs-table").waitFor();
      return [await page.getByLabel("Find a run by id").boundingBox(), await page.locator("#runs-table").boundingBox()];
    };
    let [lookup, runs] = await boxes();
    for (let tries = 1; (!lookup || !runs) && tries < 20; tries++) [lookup, runs] = await boxes();
    assert.ok(lookup && runs, "the lookup and the runs table are on the page");
    assert.ok(lookup.y + lookup.height <= runs.y, `lookup at ${lookup.y}, table at ${runs.y}`);
  });

  it("says 1 core and 1 replica, not 1 cores", async () => {
    await page.goto(`${t.url}/dashboard/apps/sleeper`);
    await page.getByText("1 core, 1 GiB").waitFor();
    await page.getByText(/\d–1 replica, 1 call each/).waitFor();
  });

  it("on a phone (390×844), no button's words break in the deployments table; a screenshot is kept", async () => {
    await newPage({ width: 390, height: 844 });
    await page.goto(`${t.url}/dashboard/apps/svc`);
    await page.locator("#deployments tr").nth(1).waitFor();
    await page.screenshot({ path: join(SHOTS, "papercuts-deployments-phone.png"), fullPage: true });
    const buttons = await page.locator("#deployments button").evaluateAll((elements) =>
      elements.map((element) => {
        const style = getComputedStyle(element);
        const line = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.3;
        const inner = element.getBoundingClientRect().height - parseFloat(style.paddingTop)
          - parseFloat(style.paddingBottom) - parseFloat(style.borderTopWidth) - parseFloat(style.borderBottomWidth);
        return { text: element.textContent, lines: Math.round(inner / line) };
      })
    );
    assert.ok(buttons.some((button) => button.text === "Activate"), JSON.stringify(buttons));
    assert.deepEqual(buttons.filter((button) => button.lines !== 1), []);
    // Nothing wider than the screen: no sideways scrolling to reach a button.
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page is ${overflow} px wider than the phone`);
  });

  it("logged no 404 on any page (the favicon is the page's own)", async () => {
    for (const path of ["runs", "apps", "apps/svc", "secrets", "keys"]) {
      await page.goto(`${t.url}/dashboard/${path}`);
      await page.locator("main h1").waitFor();
    }
    assert.deepEqual(failures, []);
    assert.deepEqual(dialogs.filter((d) => !d.startsWith("confirm")), []);
  });
});
