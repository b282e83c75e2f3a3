import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page, Response as PageResponse } from "playwright-core";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { launchBrowser, openPage } from "../_helpers/browser.ts";
import { runMain } from "../_helpers/cli.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";

// Every run saves a screenshot of each page in test-results/screenshots/ (ignored by git); with
// RUNPLANE_UPDATE_SCREENSHOTS=1 they go to docs/, where the README shows them.
const SHOTS = join(
  import.meta.dirname,
  "..",
  "..",
  process.env.RUNPLANE_UPDATE_SCREENSHOTS === "1" ? "docs" : join("test-results", "screenshots"),
);
const XSS = {
  html: "<img src=x onerror=alert(1)>",
  script: "</script><script>alert(2)</script>",
  link: "javascript:alert(3)",
};

/** `text` matched literally in a regular expression. */
function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

const browser = await launchBrowser();

describe("the dashboard in a real browser", { skip: browser === null ? "Chromium is not installed" : false }, () => {
  let t: TestServer;
  let admin: string;
  let context: BrowserContext;
  let page: Page;
  let receiver: WebhookReceiver;
  let root: string;
  const dialogs: string[] = [];

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-dashboard-"));
    await mkdir(SHOTS, { recursive: true });
    t = await startTestServer({ env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" } });
    admin = (await t.mintToken({ scopes: ["admin", "deploy", "rest", "run"] })).token;
    await deployApp(t, "hello", {
      toml: "[scaling]\nmax_replicas = 2\n",
      files: {
        "main.py":
          `import time\n\ndef run(name="world", seconds=0):\n    time.sleep(seconds)\n    return {"message": f"Hello, {name}!"}\n`,
      },
    });
    await deployApp(t, "xss", {
      toml: "",
      files: {
        "main.py": [
          "def run():",
          `    print(${JSON.stringify(XSS.script)})`,
          `    print(${JSON.stringify(XSS.html)})`,
          `    return ${JSON.stringify(XSS)}`,
          "",
          "def boom():",
          `    raise ValueError(${JSON.stringify(XSS.html)})`,
          "",
        ].join("\n"),
      },
    });
    receiver = await startWebhookReceiver();
    ({ context, page } = await openPage(browser!, dialogs, { server: t }));
  });
  after(async () => {
    await context?.close();
    await browser?.close();
    await receiver?.close();
    await t?.close();
    await rm(root, { recursive: true, force: true });
  });

  async function runApi(path: string, options: { token?: string; body?: unknown; query?: string } = {}) {
    return await fetch(`${t.url}/v4/${TEST_PROJECT}/${path}${options.query ?? ""}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${options.token ?? admin}`, "Content-Type": "application/json" },
      body: JSON.stringify(options.body ?? {}),
    });
  }

  it("shows a signed-out browser nothing but the sign-in page", async () => {
    await page.goto(`${t.url}/dashboard/runs`);
    await page.getByLabel("Service-account token").waitFor();
    assert.equal(new URL(page.url()).pathname, "/dashboard/signin");
    assert.equal(await page.locator("#runs").count(), 0);
    const answer = await page.request.get(`${t.url}/dashboard/runs`);
    const headers = answer.headers();
    // Only the server's own scripts, and the one inline script the page has: its import map, by its hash.
    const importMap = /<script type="importmap">([^<]+)<\/script>/.exec(await answer.text())?.[1] ?? "";
    const hash = createHash("sha256").update(importMap).digest("base64");
    assert.match(headers["content-security-policy"], new RegExp(`script-src 'self' 'sha256-${escapeRegExp(hash)}';`));
    assert.doesNotMatch(headers["content-security-policy"], /unsafe-inline|unsafe-eval/);
    assert.match(headers["content-security-policy"], /frame-ancestors 'none'/);
    assert.equal(headers["x-content-type-options"], "nosniff");
    assert.equal(headers["referrer-policy"], "no-referrer");
    await page.screenshot({ path: join(SHOTS, "dashboard-signin.png") });
  });

  it("signs in with a token kept sealed in an HttpOnly, SameSite=Strict cookie", async () => {
    await page.getByLabel("Service-account token").fill("not a token");
    await page.getByRole("button", { name: "Sign in" }).click();
    // In the page's main part: the sandbox warning above it is an alert too, where apps run unjailed.
    await page.locator("main").getByRole("alert").waitFor();
    await page.getByLabel("Service-account token").fill(admin);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Runs" }).waitFor();
    const [cookie] = await context.cookies();
    assert.equal(cookie.name, "runplane_session");
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, "Strict");
    assert.ok(!cookie.value.includes(admin) && !cookie.value.includes(admin.split(".")[1]), "no token in clear");
  });

  it("shows a run made with curl without a reload, filters by status in the URL, and shows its detail", async () => {
    await page.goto(`${t.url}/dashboard/runs?app=hello`);
    await page.getByRole("heading", { name: "Runs" }).waitFor();
    const made = await runApi("hello/run", { body: { name: "curl" } });
    const { run_id: runId } = (await made.json()) as { run_id: string };
    // The page follows the project's run changes: the row appears with no navigation.
    await page.locator(`tr[data-run="${runId}"]`).waitFor({ timeout: 10_000 });
    await page.getByRole("link", { name: /^success/ }).click();
    await page.waitForURL(/status=success/);
    await page.locator(`tr[data-run="${runId}"]`).waitFor();
    await page.screenshot({ path: join(SHOTS, "dashboard-runs.png") });
    await page.getByRole("link", { name: runId }).click();
    await page.locator("#run-id", { hasText: runId }).waitFor();
    assert.match(await page.locator("#result").innerText(), /"message": "Hello, curl!"/);
    await page.screenshot({ path: join(SHOTS, "dashboard-run.png"), fullPage: true });
  });

  it("shows a run's webhook attempts, and redelivers it to the receiver", async () => {
    const made = await runApi("hello/run", {
      query: `?async=true&webhookEndpoint=${encodeURIComponent(receiver.url)}`,
    });
    const { run_id: runId } = (await made.json()) as { run_id: string };
    await receiver.waitFor(1);
    await waitFor(async () => {
      await page.goto(`${t.url}/dashboard/runs/${runId}?app=hello`);
      await page.locator("#run-id").waitFor();
      return (await page.locator("#attempts tr").count()) === 1;
    }, "the attempt to show");
    assert.match(await page.locator("#attempts").innerText(), /200/);
    await page.getByRole("button", { name: "Redeliver webhook" }).click();
    await receiver.waitFor(2);
    assert.equal(receiver.requests[1].headers["x-request-id"], runId);
    await waitFor(async () => {
      await page.goto(`${t.url}/dashboard/runs/${runId}?app=hello`);
      await page.locator("#run-id").waitFor();
      return (await page.locator("#attempts tr").count()) === 2;
    }, "the second attempt to show");
  });

  it("shows an async run's input and runs it again, linked from the old run", async () => {
    const made = await runApi("hello/run", { query: "?async=true", body: { name: "again" } });
    const { run_id: runId } = (await made.json()) as { run_id: string };
    await waitFor(async () => {
      await page.goto(`${t.url}/dashboard/runs/${runId}?app=hello`);
      await page.locator("#run-id").waitFor();
      return (await page.locator("#status").innerText()) === "success";
    }, "the run to end");
    assert.match(await page.locator("main").innerText(), /"name": "again"/);
    await page.getByRole("button", { name: "Run again" }).click();
    await page.waitForURL((url) => !url.pathname.endsWith(runId));
    const newId = new URL(page.url()).pathname.split("/").pop()!;
    await page.locator("#run-id", { hasText: newId }).waitFor();
    await page.locator("#reruns").getByRole("link", { name: runId }).waitFor();
    await page.locator("#status", { hasText: "success" }).waitFor({ timeout: 15_000 });
    assert.match(await page.locator("#input").innerText(), /"name": "again"/);
    await page.goto(`${t.url}/dashboard/runs/${runId}?app=hello`);
    await page.locator("#reruns").getByRole("link", { name: newId }).waitFor();
  });

  it("cancels a running run from its page", async () => {
    const made = await runApi("hello/run", { query: "?async=true", body: { seconds: 30 } });
    const { run_id: runId } = (await made.json()) as { run_id: string };
    await waitFor(async () => {
      await page.goto(`${t.url}/dashboard/runs/${runId}?app=hello`);
      await page.locator("#run-id").waitFor();
      return (await page.locator("#status").innerText()) === "running";
    }, "the run to start");
    await page.getByRole("button", { name: "Cancel run" }).click();
    await page.locator("#status", { hasText: "cancelled" }).waitFor();
    assert.ok(dialogs.includes(`confirm: Cancel ${runId}? Its function is stopped and the run ends cancelled.`));
  });

  it("keeps a click whose press the page's live re-read came during", async () => {
    const made = await runApi("hello/run", { query: "?async=true", body: { seconds: 30 } });
    const { run_id: runId } = (await made.json()) as { run_id: string };
    // The run page reads the run, opens its change feed, and reads the run again once the feed is open.
    // The feed is held back until the button is pressed, so that this re-read comes during the press.
    let press!: () => void;
    const pressed = new Promise<void>((resolve) => (press = resolve));
    const feeds = `**/v4/projects/${TEST_PROJECT}/runs/events`;
    await page.route(feeds, async (route) => {
      await pressed;
      await route.continue().catch(() => {}); // the page of an earlier try is gone
    });
    let reads = 0;
    const countReads = (response: PageResponse) => {
      const { pathname } = new URL(response.url());
      if (response.request().method() === "GET" && pathname.endsWith(`/runs/${runId}`)) reads++;
    };
    page.on("response", countReads);
    try {
      await waitFor(async () => {
        await page.goto(`${t.url}/dashboard/runs/${runId}?app=hello`);
        await page.locator("#run-id").waitFor();
        return (await page.locator("#status").innerText()) === "running";
      }, "the run to start");
      const box = (await page.getByRole("button", { name: "Cancel run" }).boundingBox())!;
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      await page.mouse.down();
      const before = reads;
      press();
      await waitFor(() => reads > before, "the live re-read");
      // The re-read's page is rendered within a frame or two of its answer.
      for (let frame = 0; frame < 3; frame++) {
        await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(resolve)));
      }
      await page.mouse.up();
    } finally {
      page.off("response", countReads);
      await page.unroute(feeds);
    }
    await page.locator("#status", { hasText: "cancelled" }).waitFor();
  });

  it("shows hostile results, logs and errors as text: no script runs, no dialog opens", async () => {
    const ok = (await (await runApi("xss/run")).json()) as { run_id: string };
    await page.goto(`${t.url}/dashboard/runs/${ok.run_id}?app=xss`);
    await page.locator("#run-id").waitFor();
    const logs = await page.locator("#logs").innerText();
    assert.ok(logs.includes(XSS.html) && logs.includes(XSS.script), logs);
    const result = await page.locator("#result").innerText();
    for (const value of Object.values(XSS)) assert.ok(result.includes(JSON.stringify(value).slice(1, -1)), result);
    assert.equal(await page.locator("main img").count(), 0);
    assert.equal(await page.locator("main script").count(), 0);
    const failed = await runApi("xss/boom");
    const runId = failed.headers.get("x-request-id")!;
    await page.goto(`${t.url}/dashboard/runs/${runId}?app=xss`);
    await page.locator("#error").waitFor();
    assert.match(await page.locator("#error").innerText(), /<img src=x onerror=alert\(1\)>/);
    assert.equal(await page.locator("main img").count(), 0);
    await page.goto(`${t.url}/dashboard/runs?app=xss`);
    await page.locator("#runs").waitFor();
    // The only dialogs are the Cancel buttons' own confirmations (asked and accepted above): nothing alerts.
    assert.deepEqual(dialogs.filter((d) => !d.startsWith("confirm: Cancel run_")), []);
  });

  it("creates an API key shown once, which works until it is revoked", async () => {
    await page.goto(`${t.url}/dashboard/keys`);
    await page.getByLabel("Name").fill("from the dashboard");
    // Taken before a token is shown: no token, even a test server's, goes into docs/.
    await page.screenshot({ path: join(SHOTS, "dashboard-keys.png") });
    await page.getByRole("button", { name: "Create key" }).click();
    const token = (await page.locator("#new-token").innerText()).trim();
    assert.match(token, /^eyJ/);
    // The default 90 days is capped at the signed-in token's own expiry (a day, for this test's token).
    assert.match(await page.locator("tr", { hasText: "from the dashboard" }).innerText(), /\tin 24 h\t/);
    assert.equal((await runApi("hello/run", { token })).status, 200);
    const row = page.locator("tr", { hasText: "from the dashboard" });
    await row.getByRole("button", { name: /^Revoke/ }).click();
    await row.getByText("revoked").waitFor();
    assert.deepEqual(dialogs.filter((d) => !d.startsWith("confirm")), []);
    assert.equal((await runApi("hello/run", { token })).status, 401);
    await page.reload();
    await page.locator("#accounts tr", { hasText: "from the dashboard" }).getByText("revoked").waitFor();
    assert.equal(await page.locator("#new-token").count(), 0, "the token is not shown again");
  });

  it("rolls back from the app page after two deploys through the CLI", async () => {
    const env = { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: admin };
    for (const version of ["1", "2"]) {
      const dir = join(root, `v${version}`);
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, "runplane.toml"), `[deployment]\nname = "svc"\n`);
      await writeFile(join(dir, "main.py"), `def run():\n    return {"v": "${version}"}\n`);
      // A deployment's message is the deployer's text: shown as text, never as markup.
      const message = `<img src=x onerror="document.title='pwned'"> v${version}`;
      const outcome = await runMain(["deploy", dir, "--project", TEST_PROJECT, "--message", message], { env });
      assert.equal(outcome.code, 0, outcome.stderr + outcome.stdout);
    }
    const called = async () => (await (await runApi("svc/run")).json()) as { run_id: string; result: { v: string } };
    const version = async () => (await called()).result.v;
    const latest = await called();
    assert.equal(latest.result.v, "2");
    await page.goto(`${t.url}/dashboard/apps/svc`);
    await page.locator("#deployments tr").nth(1).waitFor();
    assert.match(await page.locator("#deployments tr").nth(0).innerText(), /<img src=x onerror=.*> v2/);
    assert.equal(await page.locator("#deployments img").count(), 0);
    // The run's page names the deployment that served it.
    const served = (await (await fetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/svc/deployments`, {
      headers: { Authorization: `Bearer ${admin}` },
    })).json() as { deployments: Array<{ deployment_id: string; active: boolean }> }).deployments.find((d) =>
      d.active
    )!;
    await page.goto(`${t.url}/dashboard/runs/${latest.run_id}?app=svc`);
    await page.locator("#deployment", { hasText: served.deployment_id }).waitFor();
    await page.goto(`${t.url}/dashboard/apps/svc`);
    await page.locator("#deployments tr").nth(1).waitFor();
    await page.screenshot({ path: join(SHOTS, "dashboard-app.png"), fullPage: true });
    await page.locator("#deployments tr").nth(1).getByRole("button", { name: "Activate" }).click();
    await page.locator("#deployments tr").nth(1).getByText("(active)").waitFor();
    assert.equal(await version(), "1");
    // The app page lists its recent runs (the calls above).
    await page.reload();
    await page.locator("#recent-runs tbody tr").nth(1).waitFor();
  });

  it("refuses a cross-site form POST to a state-changing route, and signs out", async () => {
    const deployments = await (await fetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/svc/deployments`, {
      headers: { Authorization: `Bearer ${admin}` },
    })).json() as { deployments: Array<{ deployment_id: string; active: boolean }> };
    const inactive = deployments.deployments.find((d) => !d.active)!;
    const target = `${t.url}/v3/projects/${TEST_PROJECT}/apps/svc/deployments/${inactive.deployment_id}/activate`;
    // Another origin (127.0.0.1 on another port is the same *site*, so SameSite alone would not stop it).
    const attacker: Server = createServer((_req, res) => {
      res.setHeader("Content-Type", "text/html");
      res.end(
        `<form id="f" method="POST" action="${target}"></form><script>document.getElementById("f").submit()</script>`,
      );
    });
    await new Promise<void>((resolve) => attacker.listen(0, "127.0.0.1", resolve));
    try {
      const evil = await context.newPage();
      const answer = evil.waitForResponse((r) => r.url() === target);
      await evil.goto(`http://127.0.0.1:${(attacker.address() as AddressInfo).port}/`);
      assert.equal((await answer).status(), 403);
      await evil.close();
    } finally {
      attacker.close();
    }
    const after = await (await fetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/svc`, {
      headers: { Authorization: `Bearer ${admin}` },
    })).json() as { active_deployment_id: string };
    assert.notEqual(after.active_deployment_id, inactive.deployment_id, "the cross-site POST changed nothing");

    await page.goto(`${t.url}/dashboard/apps`);
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("Service-account token").waitFor();
    assert.deepEqual(await context.cookies(), []);
    assert.equal((await page.request.get(`${t.url}/v3/projects/${TEST_PROJECT}/apps`)).status(), 401);
  });
});
