/**
 * The dashboard's volumes page in a real browser: linked from the navigation, it lists the project's
 * volumes with their size and use (as text), and says how to make one when there is none.
 */
import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page } from "playwright-core";
import { launchBrowser, openPage, signIn } from "../_helpers/browser.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const SHOTS = join(import.meta.dirname, "..", "..", "test-results", "screenshots");

const browser = await launchBrowser();

describe("the dashboard's volumes page", { skip: browser === null ? "Chromium is not installed" : false }, () => {
  let t: TestServer;
  let context: BrowserContext;
  let page: Page;
  const dialogs: string[] = [];

  before(async () => {
    await mkdir(SHOTS, { recursive: true });
    t = await startTestServer({ env: { RUNPLANE_VOLUMES_MODE: "directory" } });
    ({ context, page } = await openPage(browser!, dialogs, { server: t }));
    await signIn(page, { url: t.url, token: t.token });
  });
  after(async () => {
    await context?.close();
    await browser?.close();
    await t?.close();
  });

  it("says how to make a volume when the project has none", async () => {
    await page.getByRole("link", { name: "Volumes" }).click();
    await page.getByRole("heading", { name: "Volumes" }).waitFor();
    const empty = await page.locator("#no-volumes").innerText();
    assert.match(empty, new RegExp(`runplane volumes create ${TEST_PROJECT}:weights --size-gb 1`));
  });

  it("lists each volume with its size and use", async () => {
    const { volumes } = t.server.context;
    await volumes.put(TEST_PROJECT, "weights", 2);
    await volumes.put(TEST_PROJECT, "cache", 0.0625);
    async function* bytes() {
      yield new Uint8Array(16 * 1024 * 1024);
    }
    await volumes.writeFile(TEST_PROJECT, "cache", { path: "model.bin", source: bytes() });
    await page.goto(`${t.url}/dashboard/volumes`);
    await page.locator('#volumes tr[data-volume="weights"]').waitFor();
    const cache = await page.locator('#volumes tr[data-volume="cache"]').innerText();
    assert.match(cache, /cache\s+64\.0 MiB\s+16\.0 MiB \(25%\)/);
    const weights = await page.locator('#volumes tr[data-volume="weights"]').innerText();
    assert.match(weights, /weights\s+2\.0 GiB\s+0\.0 MiB \(0%\)/);
    assert.deepEqual(dialogs, []);
    await page.screenshot({ path: join(SHOTS, "dashboard-volumes.png") });
  });
});
