/**
 * The dashboard's secrets page in a real browser: lists a project's secret names (never a value), sets
 * and replaces one, deletes one, shows a refusal, and shows a name that no API call could make (a row
 * written straight into the store) as text.
 */
import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page } from "playwright-core";
import { launchBrowser, openPage, signIn as signInAs } from "../_helpers/browser.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const SHOTS = join(import.meta.dirname, "..", "..", "test-results", "screenshots");
const HOSTILE_NAME = `<img src=x onerror=alert(1)>"'&`;

const browser = await launchBrowser();

describe("the dashboard's secrets page", { skip: browser === null ? "Chromium is not installed" : false }, () => {
  let t: TestServer;
  let context: BrowserContext;
  let page: Page;
  const dialogs: string[] = [];

  async function signIn(token: string): Promise<void> {
    await context.clearCookies();
    await signInAs(page, { url: t.url, token });
  }

  before(async () => {
    await mkdir(SHOTS, { recursive: true });
    t = await startTestServer();
    await t.server.context.projectSecrets.put(TEST_PROJECT, "FROM_THE_API", "api value");
    ({ context, page } = await openPage(browser!, dialogs, { server: t }));
  });
  after(async () => {
    await context?.close();
    await browser?.close();
    await t?.close();
  });

  it("tells a token without the deploy scope how to see secrets, without calling for them", async () => {
    await signIn(t.token);
    await page.getByRole("link", { name: "Secrets" }).click();
    await page.getByText("Sign in with a token that has the deploy scope").waitFor();
    assert.equal(await page.locator("#secrets").count(), 0);
  });

  it("lists the names, sets a new secret and replaces it, never showing a value", async () => {
    await signIn((await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token);
    await page.getByRole("link", { name: "Secrets" }).click();
    await page.locator('#secrets tr[data-secret="FROM_THE_API"]').waitFor();
    await page.getByLabel("Name").fill("FROM_THE_PAGE");
    await page.getByLabel("Value").fill("page value\nwith a second line");
    await page.getByRole("button", { name: "Set secret" }).click();
    await page.getByRole("status").getByText("Created FROM_THE_PAGE.").waitFor();
    await page.locator('#secrets tr[data-secret="FROM_THE_PAGE"]').waitFor();
    assert.equal(await page.getByLabel("Value").inputValue(), "", "the value field is emptied");
    await page.screenshot({ path: join(SHOTS, "dashboard-secrets.png") });
    await page.getByLabel("Name").fill("FROM_THE_PAGE");
    await page.getByLabel("Value").fill("replaced");
    await page.getByRole("button", { name: "Set secret" }).click();
    await page.getByRole("status").getByText("Replaced FROM_THE_PAGE.").waitFor();
    const text = await page.locator("main").innerText();
    assert.ok(!text.includes("api value") && !text.includes("replaced\n"), text);
    assert.deepEqual(await t.server.context.projectSecrets.environment(TEST_PROJECT), {
      FROM_THE_API: "api value",
      FROM_THE_PAGE: "replaced",
    });
  });

  it("shows the server's refusal of a name", async () => {
    await page.getByLabel("Name").fill("RUNPLANE_MINE");
    await page.getByLabel("Value").fill("x");
    await page.getByRole("button", { name: "Set secret" }).click();
    await page.getByRole("alert").getByText(/RUNPLANE_, which the platform's own variables use/).waitFor();
    assert.equal(await page.locator('#secrets tr[data-secret="RUNPLANE_MINE"]').count(), 0);
  });

  it("deletes a secret after a confirmation", async () => {
    const row = page.locator('#secrets tr[data-secret="FROM_THE_API"]');
    await row.getByRole("button", { name: "Delete FROM_THE_API" }).click();
    await row.waitFor({ state: "detached" });
    assert.ok(dialogs.some((d) => d.startsWith("confirm: Delete FROM_THE_API?")), dialogs.join("\n"));
    assert.deepEqual(Object.keys(await t.server.context.projectSecrets.environment(TEST_PROJECT)), ["FROM_THE_PAGE"]);
  });

  it("shows a hostile name as text: no markup is made, no script runs", async () => {
    // The API refuses such a name; written straight into the store, it shows what the page does with one.
    const { db } = t.server.context.store;
    await db.insertInto("project_secrets").values({
      project_id: TEST_PROJECT,
      name: HOSTILE_NAME,
      value_sealed: t.server.context.secrets.seal("unused"),
      value_bytes: 6,
      created_at: Date.now(),
      updated_at: Date.now(),
    }).execute();
    try {
      await page.reload();
      const row = page.locator("#secrets tr").filter({ hasText: HOSTILE_NAME });
      await row.waitFor();
      assert.equal(await row.locator("td").first().innerText(), HOSTILE_NAME);
      assert.equal(await page.locator("main img").count(), 0);
      assert.equal(await row.getByRole("button").getAttribute("aria-label"), `Delete ${HOSTILE_NAME}`);
      assert.deepEqual(dialogs.filter((d) => !d.startsWith("confirm")), []);
    } finally {
      await db.deleteFrom("project_secrets").where("name", "=", HOSTILE_NAME).execute();
    }
  });
});
