/**
 * The dashboard's app page shows the OCI image each deployment runs in (`[build] base_image`): its
 * reference and digest as text, a reference that is markup included; `host system` for one without.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page } from "playwright-core";
import { launchBrowser, openPage, signIn } from "../_helpers/browser.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { startTestServer, type TestServer } from "../_helpers/server.ts";

/** A reference that is markup: the deploy's check refuses it, so it is written into the store directly. */
const REFERENCE = `registry.example/<img src=x onerror="document.title='pwned'">:trixie`;
const DIGEST = `sha256:${"0123456789abcdef".repeat(4)}`;
const browser = await launchBrowser();

describe("the dashboard's deployments with their image", {
  skip: browser === null ? "Chromium is not installed" : false,
}, () => {
  let t: TestServer;
  let context: BrowserContext;
  let page: Page;
  const dialogs: string[] = [];
  const ids: string[] = [];

  before(async () => {
    t = await startTestServer();
    const token = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
    for (const version of ["1", "2"]) {
      const bundle = await bundleOf({ "runplane.toml": "", "main.py": `def run():\n    return ${version}\n` });
      const ended = await deployBundle(t, "imaged", bundle, token);
      assert.equal(ended.status, "ready", ended.error ?? "");
      ids.push(ended.deployment_id);
    }
    // As the build records an image it pulled.
    await t.server.context.store.db.updateTable("deployments").set({ image_reference: REFERENCE, image_digest: DIGEST })
      .where("deployment_id", "=", ids[1]).execute();
    ({ context, page } = await openPage(browser!, dialogs, { server: t }));
  });
  after(async () => {
    await context?.close();
    await browser?.close();
    await t?.close();
  });

  it("shows the image's reference and digest as text, and `host system` for a deployment without one", async () => {
    await signIn(page, { url: t.url, token: t.token });
    await page.goto(`${t.url}/dashboard/apps/imaged`);
    const imaged = page.locator(`#deployments tr[data-deployment="${ids[1]}"]`);
    await imaged.waitFor();
    assert.equal(await imaged.locator(".image-reference").textContent(), REFERENCE);
    assert.equal(await imaged.locator(".image-digest").textContent(), DIGEST);
    const plain = page.locator(`#deployments tr[data-deployment="${ids[0]}"]`);
    assert.match(await plain.innerText(), /host system/);
    const headers = await page.locator("table:has(#deployments) th").allTextContents();
    assert.ok(headers.includes("Image"), headers.join(", "));
    assert.equal(await page.locator("#deployments img").count(), 0, "the reference is not markup");
    assert.notEqual(await page.title(), "pwned");
    assert.deepEqual(dialogs, []);
  });
});
