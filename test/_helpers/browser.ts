/**
 * A real browser for the dashboard's tests: Debian's Chromium (`/usr/bin/chromium`, or
 * `RUNPLANE_TEST_CHROMIUM`) driven by playwright-core — never a downloaded browser. Without it the browser
 * tests are skipped with a loud message, unless `RUNPLANE_TEST_REQUIRE_BROWSER=1` (as in `.ci/run`),
 * which makes them fail instead.
 */
import { existsSync } from "node:fs";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";

/** Where Chromium is looked for. */
export const CHROMIUM_PATH = process.env.RUNPLANE_TEST_CHROMIUM ?? "/usr/bin/chromium";

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
  return await chromium.launch({ executablePath: CHROMIUM_PATH, args: ["--no-sandbox", "--disable-gpu"] });
}

/**
 * A page in a new context of `browser` (1280×860, as the screenshots are taken) that records each dialog
 * in `dialogs` as `type: message`: a confirm() is accepted (the dashboard asks before revoking or
 * deleting), anything else dismissed (an alert is an XSS, which the tests look for).
 */
export async function openPage(browser: Browser, dialogs: string[]): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  page.on("dialog", (dialog) => {
    dialogs.push(`${dialog.type()}: ${dialog.message()}`);
    void (dialog.type() === "confirm" ? dialog.accept() : dialog.dismiss());
  });
  return { context, page };
}
