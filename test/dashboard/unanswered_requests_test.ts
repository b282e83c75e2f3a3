/**
 * The dashboard when a request gets no answer (its connection failed), in a real browser: a read is sent
 * again and the page shows as if nothing happened; when no try gets an answer the page says so and reads
 * again on "Try again", instead of staying blank; a write is never sent twice. The failures are made by
 * Playwright's request interception (`route.abort()`: the page's fetch rejects as for a dropped socket).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page, Route } from "playwright-core";
import { launchBrowser, openPage, signIn } from "../_helpers/browser.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const browser = await launchBrowser();

describe("the dashboard when a request gets no answer", {
  skip: browser === null ? "Chromium is not installed" : false,
}, () => {
  let t: TestServer;
  let context: BrowserContext;
  let page: Page;

  before(async () => {
    t = await startTestServer();
    ({ context, page } = await openPage(browser!, [], { server: t }));
    await signIn(page, { url: t.url, token: t.token });
  });
  after(async () => {
    await context?.close();
    await browser?.close();
    await t?.close();
  });

  /** Makes the first `count` GETs of `path` (`Infinity`: all) get no answer; says how many were dropped. */
  async function dropReads(path: string | RegExp, count: number): Promise<{ dropped: () => number }> {
    let dropped = 0;
    await page.route(path, async (route: Route) => {
      if (route.request().method() === "GET" && dropped < count) {
        dropped++;
        await route.abort("connectionreset");
      } else {
        await route.fallback();
      }
    });
    return { dropped: () => dropped };
  }

  it("shows the page when its first reads get no answer: the session's once, the runs listing's twice", async () => {
    const session = await dropReads("**/dashboard/session", 1);
    const listing = await dropReads(new RegExp(`/v4/projects/${TEST_PROJECT}/runs\\?`), 2);
    try {
      await page.goto(`${t.url}/dashboard/runs`);
      await page.locator("#runs, #no-runs").first().waitFor();
      assert.equal(await page.getByRole("heading", { name: "Runs" }).count(), 1);
      assert.deepEqual([session.dropped(), listing.dropped()], [1, 2]);
    } finally {
      await page.unrouteAll();
    }
  });

  it("says the server cannot be reached when no try gets an answer, and reads again on Try again", async () => {
    const session = await dropReads("**/dashboard/session", Infinity);
    try {
      await page.goto(`${t.url}/dashboard/runs`);
      await page.getByRole("heading", { name: "The server cannot be reached" }).waitFor();
      assert.equal(session.dropped(), 3, "the first try and two more");
      assert.match(await page.locator("main [role=alert]").innerText(), /fetch/i);
    } finally {
      await page.unrouteAll();
    }
    await page.getByRole("button", { name: "Try again" }).click();
    await page.locator("#runs, #no-runs").first().waitFor();
  });

  it("never sends a write twice", async () => {
    await page.goto(`${t.url}/dashboard/runs`);
    await page.locator("#runs, #no-runs").first().waitFor();
    const sent: string[] = [];
    await page.route("**/dashboard/tried", async (route) => {
      sent.push(route.request().method());
      await route.abort("connectionreset");
    });
    try {
      // (No named function in here: tsx's names for them do not exist in the page.)
      const outcomes = await page.evaluate(async () => {
        const url = "/dashboard/assets/transport.js";
        const { fetchWithRetry } = await import(url);
        const got: string[] = [];
        for (const method of ["POST", "GET"]) {
          const body = method === "POST" ? "{}" : undefined;
          got.push(
            await fetchWithRetry("/dashboard/tried", { method, body }).then(() => "answered", (e: Error) => e.name),
          );
        }
        return got;
      });
      assert.deepEqual(outcomes, ["TypeError", "TypeError"]);
      assert.deepEqual(sent, ["POST", "GET", "GET", "GET"], "the POST once, the GET three times");
    } finally {
      await page.unrouteAll();
    }
  });
});
