/**
 * The dashboard as a triage tool, in a real browser: one paged listing of every app's runs (from the
 * server's `listProjectRuns`, not a request per app), each failed run's error, filters by app, function,
 * status, mode and time range, absolute times on demand, rounded durations, copy-as-curl (run in a real
 * shell), a phone layout, the navigation hidden while signed out, the stream reader, and hostile run
 * data shown as text.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { BrowserContext, Page } from "playwright-core";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { launchBrowser, newContext, openPage } from "../_helpers/browser.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const run = promisify(execFile);
// As dashboard_test.ts: screenshots in test-results/screenshots/, or in docs/ with RUNPLANE_UPDATE_SCREENSHOTS=1.
const SHOTS = join(
  import.meta.dirname,
  "..",
  "..",
  process.env.RUNPLANE_UPDATE_SCREENSHOTS === "1" ? "docs" : join("test-results", "screenshots"),
);
const HOSTILE = `<img src=x onerror=alert(1)>`;
// One word longer than a phone is wide: it must wrap, not widen the page.
const LONG_WORD = "x".repeat(300);

const MAIN = `
import time

def ok(name="world"):
    return {"hello": name}

def slow(seconds):
    time.sleep(seconds)
    return seconds

def fail():
    raise ValueError(${JSON.stringify(`bad value ${HOSTILE}`)})

def long_fail():
    raise KeyError(${JSON.stringify(LONG_WORD)})

def items():
    yield "  two leading spaces"
    yield "line one\\nline two"
    yield {"n": 1}
    raise RuntimeError(${JSON.stringify(`mid-stream ${HOSTILE}`)})
`;

const browser = await launchBrowser();

describe("the dashboard's triage view", { skip: browser === null ? "Chromium is not installed" : false }, () => {
  let t: TestServer;
  let admin: string;
  let context: BrowserContext;
  let page: Page;
  let scratch: string;
  const dialogs: string[] = [];
  /** The paths of the requests the page made, in order. */
  const requests: string[] = [];

  before(async () => {
    await mkdir(SHOTS, { recursive: true });
    scratch = await mkdtemp(join(tmpdir(), "runplane-triage-"));
    t = await startTestServer();
    admin = (await t.mintToken({ scopes: ["admin", "deploy", "rest", "run"] })).token;
    await deployApp(t, "alpha", { toml: "[scaling]\nmax_replicas = 2\n", files: { "main.py": MAIN } });
    await deployApp(t, "beta", { toml: "", files: { "main.py": MAIN } });
    ({ context, page } = await openPage(browser!, dialogs, { server: t }));
    page.on("request", (request) => requests.push(new URL(request.url()).pathname));
  });
  after(async () => {
    await context?.close();
    await browser?.close();
    await t?.close();
    await rm(scratch, { recursive: true, force: true });
  });

  /** Calls `app`'s `fn` with `body`; resolves with the run id. */
  async function call(app: string, fn: string, options: { body?: unknown; async?: boolean } = {}): Promise<string> {
    const response = await fetch(`${t.url}/v4/${TEST_PROJECT}/${app}/${fn}${options.async ? "?async=true" : ""}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
      body: JSON.stringify(options.body ?? {}),
    });
    await response.text();
    return response.headers.get("x-request-id")!;
  }

  /** The stored run, once it has ended. */
  async function ended(app: string, runId: string) {
    let record: { status: string; input: unknown } | undefined;
    await waitFor(async () => {
      const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
        params: { path: { project_id: TEST_PROJECT, app_id: app, run_id: runId } },
      });
      record = data;
      return data !== undefined && !["queued", "running"].includes(data.status);
    }, `run ${runId} to end`);
    return record!;
  }

  /** The ids of the runs listed, in order. */
  async function listed(): Promise<string[]> {
    return await page.locator("#runs tr").evaluateAll((rows) => rows.map((row) => row.getAttribute("data-run") ?? ""));
  }

  /** Opens the runs view at `query` and waits for its list (or its word that nothing matches). */
  async function openRuns(query = ""): Promise<void> {
    await page.goto(`${t.url}/dashboard/runs${query}`);
    await page.locator("#runs, #no-runs").first().waitFor();
  }

  it("hides the navigation while signed out, and shows it once signed in", async () => {
    await page.goto(`${t.url}/dashboard/runs`);
    await page.getByLabel("Service-account token").waitFor();
    assert.equal(await page.locator("#nav").isHidden(), true, "the navigation of a signed-out page");
    assert.equal(await page.getByRole("button", { name: "Sign out" }).isHidden(), true);
    await page.getByLabel("Service-account token").fill(admin);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Runs" }).waitFor();
    assert.equal(await page.locator("#nav").isVisible(), true);
    assert.equal(await page.getByRole("button", { name: "Sign out" }).isVisible(), true);
  });

  it("lists every app's runs in one paged listing from the server, newest first", async () => {
    for (let i = 0; i < 30; i++) await call(i % 2 ? "alpha" : "beta", "ok", { body: { name: `n${i}` } });
    const { data } = await t.client.GET("/v4/projects/{project_id}/runs", {
      params: { path: { project_id: TEST_PROJECT }, query: { limit: 200 } },
    });
    const all = data!.runs.map((r) => r.run_id);
    assert.ok(all.length >= 30);
    requests.length = 0;
    await openRuns();
    assert.deepEqual(await listed(), all.slice(0, 50));
    // The list is the server's: no request lists one app's runs.
    assert.deepEqual(requests.filter((path) => /\/apps\/[^/]+\/runs$/.test(path)), []);
    assert.ok(requests.includes(`/v4/projects/${TEST_PROJECT}/runs`), requests.join("\n"));
    if (all.length > 50) {
      await page.getByRole("link", { name: "Older runs →" }).click();
      await page.waitForURL(/cursor=/);
      await waitFor(async () => (await listed())[0] === all[50], "the second page");
      assert.deepEqual(await listed(), all.slice(50, 100));
      await page.getByRole("link", { name: "← Newest runs" }).click();
      await waitFor(async () => (await listed())[0] === all[0], "the first page again");
    }
  });

  it("shows each failed run's error once, as Type: message, and hostile text as text", async () => {
    const runId = await call("alpha", "fail");
    await openRuns();
    const error = page.locator(`tr[data-run="${runId}"] td.err`);
    assert.equal(await error.textContent(), `ValueError: bad value ${HOSTILE}`);
    assert.equal(await error.getAttribute("title"), `ValueError: bad value ${HOSTILE}`);
    await page.screenshot({ path: join(SHOTS, "dashboard-triage.png") });
    await page.locator(`tr[data-run="${runId}"]`).getByRole("link", { name: runId }).click();
    await page.locator("#error").waitFor();
    assert.equal(await page.locator("#error").textContent(), `ValueError: bad value ${HOSTILE}`);
    const traceback = (await page.locator("#traceback").textContent()) ?? "";
    assert.match(traceback, /File "main\.py", line \d+, in fail\n/);
    assert.doesNotMatch(traceback, /_worker\.py|File "\//);
    assert.equal(await page.locator("main img").count(), 0);
    assert.deepEqual(dialogs, []);
  });

  it("filters by function, status, mode, app and time range, and keeps the filters in the address", async () => {
    const asyncRun = await call("beta", "ok", { async: true });
    await ended("beta", asyncRun);
    await openRuns();
    const form = page.locator("#filters");
    await form.getByLabel("Function").fill("fail");
    await form.getByRole("button", { name: "Filter" }).click();
    await page.waitForURL(/function=fail/);
    await waitFor(
      async () => (await page.locator("#runs td[data-label='Function']").allTextContents()).length > 0,
      "rows",
    );
    assert.deepEqual(
      new Set(await page.locator("#runs td[data-label='Function']").allTextContents()),
      new Set(["fail"]),
    );

    await openRuns("?status=success&mode=async");
    assert.deepEqual(await listed(), [asyncRun]);
    assert.equal(await page.locator("#filters select[name='mode']").inputValue(), "async");

    await openRuns();
    await page.locator("#filters select[name='app']").selectOption("beta");
    await page.locator("#filters select[name='mode']").selectOption("sync");
    await form.getByRole("button", { name: "Filter" }).click();
    await page.waitForURL(/app=beta&mode=sync|mode=sync.*app=beta|app=beta.*mode=sync/);
    // The address changes before the filtered list replaces the old one: CI once read the old rows.
    const cells = (label: string) => page.locator(`#runs td[data-label='${label}']`).allTextContents();
    await waitFor(async () => {
      const apps = await cells("App");
      return apps.length > 0 && apps.every((app) => app === "beta");
    }, "the filtered rows");
    assert.deepEqual(new Set(await page.locator("#runs td[data-label='App']").allTextContents()), new Set(["beta"]));
    assert.deepEqual(new Set(await page.locator("#runs td[data-label='Mode']").allTextContents()), new Set(["sync"]));

    // A range: every run so far is in the last 15 minutes, none before 2000 or after an hour from now.
    await openRuns("?since=15m");
    assert.ok((await listed()).includes(asyncRun));
    await openRuns();
    await form.getByLabel("To").fill("2000-01-01T00:00:00");
    await form.getByRole("button", { name: "Filter" }).click();
    await page.locator("#no-runs").waitFor();
    assert.match(page.url(), /to=2000-01-01T00%3A00/);
    const inAnHour = new Date(Date.now() + 3_600_000);
    const local = new Date(inAnHour.getTime() - inAnHour.getTimezoneOffset() * 60_000).toISOString().slice(0, 19);
    await openRuns(`?from=${encodeURIComponent(local)}`);
    await page.locator("#no-runs").waitFor();
    await page.getByRole("link", { name: "Clear" }).click();
    await page.locator("#runs tr").first().waitFor();
  });

  it("shows absolute times on demand, and remembers the choice", async () => {
    await openRuns();
    const first = page.locator("#runs time").first();
    assert.match((await first.textContent()) ?? "", /ago|just now/);
    assert.match((await first.getAttribute("title")) ?? "", /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(/);
    await page.getByLabel("Absolute times").check();
    await waitFor(async () => /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/.test((await first.textContent()) ?? ""), "absolute");
    assert.match((await first.getAttribute("title")) ?? "", /ago|just now/);
    await page.reload();
    await page.locator("#runs time").first().waitFor();
    assert.match((await page.locator("#runs time").first().textContent()) ?? "", /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
    await page.getByLabel("Absolute times").uncheck();
    await waitFor(async () => /ago|just now/.test((await first.textContent()) ?? ""), "relative again");
  });

  it("rounds durations as people read them", async () => {
    const slow = await call("alpha", "slow", { body: { seconds: 1.2 } });
    await openRuns();
    assert.match(
      (await page.locator(`tr[data-run="${slow}"] td[data-label='Run time']`).textContent()) ?? "",
      /^\d+\.\d s$/,
    );
    for (const text of await page.locator("#runs td[data-label='Run time']").allTextContents()) {
      assert.match(text, /^(< 1 ms|\d+ ms|\d+\.\d s|\d+ min \d+ s|–)$/);
    }
    const formatted = await page.evaluate(async () => {
      const url = "/dashboard/assets/format.js";
      const { duration } = await import(url);
      return [5072, 120.4, 0.3, 999.6, 59_960, 125_000, 3_723_000, null].map((ms) => duration(ms));
    });
    assert.deepEqual(formatted, ["5.1 s", "120 ms", "< 1 ms", "1.0 s", "1 min 0 s", "2 min 5 s", "1 h 2 min", "–"]);
  });

  it("copies a run's call as curl without its token, and the command runs the same call", async () => {
    const marker = join(scratch, "pwned");
    const input = { text: `it's "quoted" $(touch ${marker}) \`touch ${marker}\` ${HOSTILE}`, n: [1, 2] };
    const runId = await call("alpha", "ok", { async: true, body: { name: input } });
    await ended("alpha", runId);
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: t.url });
    await page.goto(`${t.url}/dashboard/runs/${runId}?app=alpha`);
    await page.locator("#run-id").waitFor();
    const command = (await page.locator("#curl").textContent()) ?? "";
    assert.ok(!command.includes(admin), "the token is not in the command");
    assert.match(command, /-H "Authorization: Bearer \$RUNPLANE_TOKEN"/);
    assert.match(command, /\?async=true'/);
    await page.getByRole("button", { name: "Copy as curl" }).click();
    await page.locator("#copy-curl", { hasText: "Copied" }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), command);
    // Run as a terminal would: the shell expands only $RUNPLANE_TOKEN.
    const { stdout } = await run("bash", ["-c", command], { env: { ...process.env, RUNPLANE_TOKEN: admin } });
    const again = (JSON.parse(stdout) as { run_id: string }).run_id;
    assert.deepEqual((await ended("alpha", again)).input, { name: input });
    assert.equal(existsSync(marker), false, "nothing in the input ran");
  });

  it("reads a streamed call with eventsource-parser: leading spaces kept, an error event and a 404 shown", async () => {
    await page.goto(`${t.url}/dashboard/apps/beta`);
    await page.getByLabel("Function").fill("items");
    await page.getByLabel("Stream the items as they are yielded").check();
    await page.getByRole("button", { name: "Call" }).click();
    await page.getByText("The call failed.").waitFor();
    assert.deepEqual(await page.locator("#stream-items pre").allTextContents(), [
      "  two leading spaces",
      "line one\nline two",
      `{"n":1}`,
    ]);
    const problems = page.locator("#stream-problems [role='alert']");
    assert.equal(await problems.count(), 1);
    assert.match((await problems.textContent()) ?? "", /RuntimeError: mid-stream <img src=x onerror=alert\(1\)>/);

    await page.getByLabel("Function").fill("nothing_here");
    await page.getByRole("button", { name: "Call" }).click();
    await page.locator("#stream-problems [role='alert']", { hasText: "Not found" }).waitFor();
    assert.match((await page.locator("#stream-problems").textContent()) ?? "", /no public function named nothing_here/);
    assert.equal(await page.locator("#stream-items li").count(), 0);
    assert.equal(await page.locator("main img").count(), 0);
    assert.deepEqual(dialogs, []);
  });

  it("fits a phone's width (390 px) with no sideways scrolling", async () => {
    const failed = await call("alpha", "long_fail");
    const phone = await newContext(browser!, {
      viewport: { width: 390, height: 844 },
      storageState: await context.storageState(),
      server: t,
    });
    try {
      const small = await phone.newPage();
      for (const path of ["/dashboard/runs", `/dashboard/runs/${failed}?app=alpha`, "/dashboard/apps/alpha"]) {
        await small.goto(`${t.url}${path}`);
        await small.locator("h1").first().waitFor();
        await small.locator("#runs tr, #run-id, #recent-runs").first().waitFor();
        const widths = await small.evaluate(() => ({
          page: document.documentElement.scrollWidth,
          view: document.documentElement.clientWidth,
        }));
        assert.ok(widths.page <= widths.view, `${path} is ${widths.page} px wide in ${widths.view} px`);
        assert.equal(await small.locator("#nav").isVisible(), true);
      }
      await small.goto(`${t.url}/dashboard/runs`);
      await small.locator("#runs tr").first().waitFor();
      await small.screenshot({ path: join(SHOTS, "dashboard-runs-phone.png"), fullPage: false });
    } finally {
      await phone.close();
    }
  });
});
