/**
 * A real browser for the dashboard's tests: Debian's Chromium (`/usr/bin/chromium`, or
 * `RUNPLANE_TEST_CHROMIUM`) driven by playwright-core — never a downloaded browser. Without it the browser
 * tests are skipped with a loud message, unless `RUNPLANE_TEST_REQUIRE_BROWSER=1` (as in `.ci/run`),
 * which makes them fail instead.
 */
import { existsSync } from "node:fs";
import { type Browser, type BrowserContext, type BrowserContextOptions, chromium, type Page } from "playwright-core";
import { type ServerLog, watchContext } from "./page_diagnostics.ts";

/** Where Chromium is looked for. */
export const CHROMIUM_PATH = process.env.RUNPLANE_TEST_CHROMIUM ?? "/usr/bin/chromium";

/**
 * Chromium's flags: no sandbox (root) and no GPU, and none of its own network traffic (component updates,
 * sync, QUIC): on a machine without the internet each such attempt is refused or waits on a
 * name lookup, beside the page under test, which a loaded CI machine can least afford (a sign-in page once
 * took over 30 s to show its form there).
 */
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--disable-quic",
  "--no-first-run",
];

/** Launches Chromium headless, or returns null (after saying so loudly) when it is not installed. */
export async function launchBrowser(): Promise<Browser | null> {
  if (!existsSync(CHROMIUM_PATH)) {
    const message = `Chromium is not installed at ${CHROMIUM_PATH} (apt-get install chromium)`;
    if (process.env.RUNPLANE_TEST_REQUIRE_BROWSER === "1") {
      throw new Error(`${message}, and RUNPLANE_TEST_REQUIRE_BROWSER=1 requires it`);
    }
    process.stderr.write(
      `\n*** SKIPPING the browser tests: ${message}.\n*** Set RUNPLANE_TEST_REQUIRE_BROWSER=1 to fail instead.\n\n`,
    );
    return null;
  }
  return await chromium.launch({ executablePath: CHROMIUM_PATH, args: CHROMIUM_ARGS });
}

/**
 * A new context of `browser` (1280×860 unless `viewport`, as the screenshots are taken; `storageState` to
 * carry a session over) whose every page waits up to a minute: six shards on two cores slow Chromium and
 * the server alike, and a page opened without it waited Playwright's default 30 s (a phone-sized runs
 * page once took longer than that in CI). A wait that times out says what its page met (`watchContext`),
 * the server's side too when `server` is given.
 */
export async function newContext(
  browser: Browser,
  options: Pick<BrowserContextOptions, "viewport" | "storageState"> & { server?: ServerLog } = {},
): Promise<BrowserContext> {
  const { server, ...contextOptions } = options;
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, ...contextOptions });
  // Waits (not assertions) get a minute, in every page of the context.
  context.setDefaultTimeout(60_000);
  watchContext(context, server);
  return context;
}

/**
 * A page in a new context of `browser` (see `newContext`) that records each dialog in `dialogs` as
 * `type: message`: a confirm() is accepted (the dashboard asks before revoking or deleting), anything
 * else dismissed (an alert is an XSS, which the tests look for).
 */
export async function openPage(
  browser: Browser,
  dialogs: string[],
  options: { server?: ServerLog } = {},
): Promise<{ context: BrowserContext; page: Page }> {
  const context = await newContext(browser, options);
  const page = await context.newPage();
  page.on("dialog", (dialog) => {
    dialogs.push(`${dialog.type()}: ${dialog.message()}`);
    void (dialog.type() === "confirm" ? dialog.accept() : dialog.dismiss());
  });
  return { context, page };
}

/**
 * Signs `page` in to the dashboard of the server at `url` with `token` (its sign-in form), and waits for
 * the runs page it lands on.
 */
export async function signIn(page: Page, options: { url: string; token: string }): Promise<void> {
  await page.goto(`${options.url}/dashboard/signin`);
  await page.getByLabel("Service-account token").fill(options.token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Runs" }).waitFor();
}
