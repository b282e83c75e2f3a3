/**
 * The dashboard says loudly when the server runs tenants' code unjailed (RUNPLANE_SANDBOX=off, or auto
 * where bubblewrap cannot run), and says nothing when it is jailed.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { launchBrowser, openPage } from "../_helpers/browser.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { startTestServer, type TestServer } from "../_helpers/server.ts";

const browser = await launchBrowser();

describe("the dashboard's sandbox warning", { skip: browser === null ? "Chromium is not installed" : false }, () => {
  const servers: TestServer[] = [];
  after(async () => {
    await browser?.close();
    for (const server of servers) await server.close();
  });

  async function bannerOf(env: Record<string, string>): Promise<{ hidden: boolean; text: string }> {
    const t = await startTestServer({ env });
    servers.push(t);
    const { context, page } = await openPage(browser!, []);
    try {
      const readiness = page.waitForResponse((response) => new URL(response.url()).pathname === "/readyz");
      await page.goto(`${t.url}/dashboard/signin`);
      await page.getByRole("button", { name: "Sign in" }).waitFor();
      // The page reads /readyz once; its answer is shown within the same turn of the page's event loop.
      assert.equal((await readiness).status(), 200);
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
  });

  it("shows nothing when tenants' code runs jailed", async (t) => {
    if (!(await sandboxWorks("the dashboard's jailed case"))) return t.skip("the sandbox cannot run here");
    const banner = await bannerOf({ RUNPLANE_SANDBOX: "required" });
    assert.equal(banner.hidden, true);
  });
});
