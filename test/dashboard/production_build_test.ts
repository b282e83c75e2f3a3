/**
 * The production build serves the dashboard: `npm run build`'s output started as the README says
 * (`node dist/server/main.js`, no tsx) answers `/dashboard`, each of its modules and the packages they
 * import, and the page runs in a real browser.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { buildDist } from "../../scripts/build.ts";
import { launchBrowser, openPage } from "../_helpers/browser.ts";
import { ROOT } from "../_helpers/packed_package.ts";
import { makeServerDirs, type ServerDirs, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";

describe("the production build's dashboard", { timeout: 600_000 }, () => {
  // Built inside the checkout (its `node_modules` is where the built server finds its packages), apart
  // from `dist/`, which another test may be packing meanwhile.
  const out = join(ROOT, ".tmp", `build-${randomBytes(4).toString("hex")}`);
  let dirs: ServerDirs;
  let server: ServerProcess;

  before(async () => {
    await buildDist(out);
    dirs = await makeServerDirs("runplane-prod-dashboard-");
    server = await startServerProcess(dirs.env, { entry: join(out, "server", "main.js") });
  });
  after(async () => {
    await server?.kill();
    await dirs?.remove();
    await rm(out, { recursive: true, force: true });
  });

  it("answers /dashboard and its pages with the page", async () => {
    for (const path of ["/dashboard", "/dashboard/runs", "/dashboard/signin"]) {
      const response = await fetch(`${server.url}${path}`);
      assert.equal(response.status, 200, path);
      assert.match(response.headers.get("content-type") ?? "", /^text\/html/);
      assert.match(await response.text(), /<script type="module" src="\/dashboard\/assets\/app\.js">/);
    }
  });

  it("serves every module of the dashboard and the packages they import as JavaScript", async () => {
    const modules = (await readdir(join(ROOT, "client", "dashboard"))).filter((name) => name.endsWith(".js"));
    assert.ok(modules.includes("app.js") && modules.length > 5, modules.join(", "));
    const vendor = [
      "openapi-fetch.mjs",
      "eventsource-parser/stream.js",
      "eventsource-parser/index.js",
      "uplot.mjs",
      "uplot.css",
    ];
    const styles = ["style.css", "app_insights.css"];
    for (const path of [...modules, ...styles, ...vendor.map((file) => `vendor/${file}`)]) {
      const response = await fetch(`${server.url}/dashboard/assets/${path}`);
      assert.equal(response.status, 200, path);
      const type = response.headers.get("content-type") ?? "";
      assert.match(type, path.endsWith(".css") ? /^text\/css/ : /^text\/javascript/, path);
      assert.ok((await response.text()).length > 0, path);
    }
  });

  it("runs in a real browser: the sign-in page shows, with no script error", async (t) => {
    const browser = await launchBrowser();
    if (!browser) return t.skip("Chromium is not installed");
    const errors: string[] = [];
    try {
      const { page } = await openPage(browser, errors);
      page.on("pageerror", (error) => errors.push(error.message));
      // Every request the page makes must be answered: a module that did not load is a 404 here. The
      // browser's own favicon request and the signed-out session check (401) are not the page's.
      page.on("response", (response) => {
        const path = new URL(response.url()).pathname;
        if (response.status() >= 400 && path !== "/favicon.ico" && path !== "/dashboard/session") {
          errors.push(`${response.status()} ${path}`);
        }
      });
      await page.goto(`${server.url}/dashboard`);
      await page.getByLabel("Service-account token").fill(server.token);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("heading", { name: "Runs" }).waitFor();
      assert.deepEqual(errors, []);
    } finally {
      await browser.close();
    }
  });
});
