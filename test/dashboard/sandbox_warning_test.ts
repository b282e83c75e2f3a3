/**
 * The dashboard says loudly when the server runs tenants' code unjailed (RUNPLANE_SANDBOX=off), or
 * refuses deployments because it would (auto where bubblewrap cannot run), and says nothing when it is
 * jailed.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { launchBrowser, openPage } from "../_helpers/browser.ts";
import { sandboxWorks, withoutJail } from "../_helpers/sandbox.ts";
import { startTestServer, type TestServer } from "../_helpers/server.ts";
import { makeServerDirs, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";

const browser = await launchBrowser();
/** How long a page step may take: generous, for a machine running the whole suite on two cores. */
const LOADED_MACHINE_MS = 90_000;

describe("the dashboard's sandbox warning", { skip: browser === null ? "Chromium is not installed" : false }, () => {
  const servers: TestServer[] = [];
  const processes: ServerProcess[] = [];
  const removals: Array<() => Promise<void>> = [];
  after(async () => {
    await browser?.close();
    for (const server of servers) await server.close();
    for (const server of processes) await server.kill();
    for (const remove of removals) await remove();
  });

  async function bannerOf(env: Record<string, string>): Promise<{ hidden: boolean; text: string }> {
    const t = await startTestServer({ env });
    servers.push(t);
    const { context, page } = await openPage(browser!, [], { server: t });
    // What became of the page's one /readyz fetch, recorded as it happens: a listener, not a pending
    // waitForResponse, so a slow page load on a loaded machine fails below with what was seen (CI once
    // timed out a waitForResponse armed before the load, as an unhandled rejection that said nothing).
    const seen: string[] = [];
    let readiness: number | undefined;
    page.on("requestfinished", async (request) => {
      if (new URL(request.url()).pathname !== "/readyz") return;
      readiness = (await request.response())?.status();
      seen.push(`/readyz answered ${readiness}`);
    });
    page.on("requestfailed", (request) => seen.push(`${request.url()} failed: ${request.failure()?.errorText}`));
    page.on("console", (message) => seen.push(`console ${message.type()}: ${message.text()}`));
    try {
      await page.goto(`${t.url}/dashboard/signin`, { timeout: LOADED_MACHINE_MS });
      await page.getByRole("button", { name: "Sign in" }).waitFor({ timeout: LOADED_MACHINE_MS });
      const started = Date.now();
      while (readiness === undefined && Date.now() - started < LOADED_MACHINE_MS) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.equal(readiness, 200, `the page's /readyz: ${seen.join("; ") || "never requested"}`);
      // The page shows /readyz's answer within the same turn of its event loop as the answer's body.
      await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 50)));
      const banner = page.locator("#sandbox-warning");
      return { hidden: await banner.isHidden(), text: (await banner.textContent()) ?? "" };
    } finally {
      await context.close();
    }
  }

  it("shows the warning, signed in or not, when tenants' code runs unjailed", async () => {
    const banner = await bannerOf({ RUNPLANE_SANDBOX: "off" });
    assert.equal(banner.hidden, false);
    assert.match(banner.text, /unjailed/);
    assert.match(banner.text, /RUNPLANE_SANDBOX=off/);
    // Said once: the lead says the code runs unjailed, the reasons do not say it again.
    assert.equal(banner.text.match(/tenants' code runs unjailed/gi)?.length, 1, banner.text);
  });

  it("says on every page, and where deployments are shown, that they are refused where no jail works under auto", async (t) => {
    const dirs = await makeServerDirs("runplane-dashboard-no-jail-");
    removals.push(dirs.remove);
    await dirs.deploy("folder-app", { "runplane.toml": '[deployment]\nname = "folder-app"\n', "main.py": "" });
    const taken = await withoutJail("the dashboard's refused deployments", { how: "missing", dir: dirs.root });
    if (!taken) return t.skip("mount namespaces cannot be made here");
    const server = await startServerProcess({ ...dirs.env, ...taken.env, RUNPLANE_SANDBOX: "auto" }, {
      wrap: taken.wrap,
    });
    processes.push(server);
    const { context, page } = await openPage(browser!, []);
    try {
      await page.goto(`${server.url}/dashboard/signin`, { timeout: LOADED_MACHINE_MS });
      await page.getByLabel("Service-account token").fill(server.token);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("heading", { name: "Runs" }).waitFor({ timeout: LOADED_MACHINE_MS });
      const banner = page.locator("#sandbox-warning");
      await banner.waitFor({ timeout: LOADED_MACHINE_MS });
      assert.match(
        (await banner.textContent()) ?? "",
        /^This server refuses deployments: tenants' code would run unjailed/,
      );
      assert.match((await banner.textContent()) ?? "", /bubblewrap is missing \(apt-get install bubblewrap\)/);
      const text = (await banner.textContent()) ?? "";
      // Each thing said once: that it refuses, that the code would run unjailed.
      assert.equal(text.match(/refuse/gi)?.length, 1, text);
      assert.equal(text.match(/tenants' code (would run|runs) unjailed/gi)?.length, 1, text);
      await page.getByRole("link", { name: "Apps" }).click();
      const note = page.locator("[data-note=deployments-refused]");
      await note.waitFor({ timeout: LOADED_MACHINE_MS });
      assert.match((await note.textContent()) ?? "", /Deployments are refused on this server/);
      assert.match((await note.textContent()) ?? "", /RUNPLANE_SANDBOX=off/);
    } finally {
      await context.close();
    }
  });

  it("shows the warning on the page already open once a server that was not ready is", async () => {
    const t = await startTestServer({ env: { RUNPLANE_SANDBOX: "off" } });
    servers.push(t);
    const { context, page } = await openPage(browser!, [], { server: t });
    // The first two reads of /readyz answer as a server still starting does (CI met one: its apps folder
    // was loading); the page must ask again, not wait for a reload.
    let notReady = 2;
    await page.route("**/readyz", async (route) => {
      if (notReady-- <= 0) return await route.fallback();
      await route.fulfill({
        status: 503,
        contentType: "application/problem+json",
        body: JSON.stringify({ type: "about:blank", title: "Service Unavailable", status: 503 }),
      });
    });
    try {
      await page.goto(`${t.url}/dashboard/signin`, { timeout: LOADED_MACHINE_MS });
      await page.locator("#sandbox-warning").waitFor({ timeout: LOADED_MACHINE_MS });
      assert.match((await page.locator("#sandbox-warning").textContent()) ?? "", /RUNPLANE_SANDBOX=off/);
      assert.ok(notReady < 0, "the page read /readyz a third time");
    } finally {
      await context.close();
    }
  });

  it("shows nothing when tenants' code runs jailed", async (t) => {
    if (!(await sandboxWorks("the dashboard's jailed case"))) return t.skip("the sandbox cannot run here");
    const banner = await bannerOf({ RUNPLANE_SANDBOX: "required" });
    assert.equal(banner.hidden, true);
  });
});
