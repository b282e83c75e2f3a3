/**
 * A real browser for the dashboard's tests: Debian's Chromium (`/usr/bin/chromium`, or
 * `RUNPLANE_TEST_CHROMIUM`) driven by playwright-core — never a downloaded browser. Without it the browser
 * tests are skipped with a loud message, unless `RUNPLANE_TEST_REQUIRE_BROWSER=1` (as in `.ci/run`),
 * which makes them fail instead.
 */
import { existsSync } from "node:fs";
import {
  type Browser,
  type BrowserContext,
  type BrowserContextOptions,
  chromium,
  type Locator,
  type Page,
  type Request,
} from "playwright-core";

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
 * page once took longer than that in CI).
 */
export async function newContext(
  browser: Browser,
  options: Pick<BrowserContextOptions, "viewport" | "storageState"> = {},
): Promise<BrowserContext> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, ...options });
  // Waits (not assertions) get a minute, in every page of the context.
  context.setDefaultTimeout(60_000);
  context.on("page", recordTroubles);
  return context;
}

/** The last troubles each page met (console errors, page errors, failed requests, 5xx answers). */
const troubles = new WeakMap<Page, string[]>();
/** The requests each page made that have not ended, with when they began. */
const pending = new WeakMap<Page, Map<Request, number>>();

/** Keeps `page`'s last 20 troubles, for `shown` to tell when a wait fails. */
function recordTroubles(page: Page): void {
  const lines: string[] = [];
  troubles.set(page, lines);
  const note = (line: string) => {
    lines.push(line.slice(0, 300));
    if (lines.length > 20) lines.shift();
  };
  page.on("console", (message) => {
    if (message.type() === "error" || message.type() === "warning") {
      note(`console ${message.type()}: ${message.text()}`);
    }
  });
  page.on("pageerror", (error) => note(`page error: ${error.message}`));
  page.on("crash", () => note("the page crashed"));
  page.on(
    "requestfailed",
    (request) => note(`failed: ${request.method()} ${request.url()} (${request.failure()?.errorText})`),
  );
  page.on("response", (response) => {
    if (response.status() >= 500) note(`${response.status()}: ${response.request().method()} ${response.url()}`);
  });
  const open = new Map<Request, number>();
  pending.set(page, open);
  page.on("request", (request) => open.set(request, Date.now()));
  page.on("requestfinished", (request) => open.delete(request));
  page.on("requestfailed", (request) => open.delete(request));
}

/** `page`'s requests that have not ended, each with its age. */
function unfinished(page: Page): string[] {
  const now = Date.now();
  return [...(pending.get(page) ?? new Map<Request, number>())].map(([request, began]) =>
    `${request.method()} ${request.url()} (${((now - began) / 1000).toFixed(1)} s)`
  );
}

/**
 * Waits for `locator` to be visible; when it never is, the error says what the page showed instead (its
 * address and main text), the troubles it met and its requests not ended, and what `also` adds (the
 * server's side), so that a wait that times out in CI can be explained.
 */
export async function shown(locator: Locator, options: { also?: () => string } = {}): Promise<void> {
  try {
    await locator.waitFor();
  } catch (error) {
    const page = locator.page();
    const main = await page.locator("main").innerText({ timeout: 5_000 }).catch((e: Error) =>
      `(unreadable: ${e.message})`
    );
    const met = troubles.get(page) ?? [];
    const open = unfinished(page);
    throw new Error(
      `${(error as Error).message}\nthe page at ${page.url()} shows: ${JSON.stringify(main.slice(0, 600))}`
        + `\nits troubles: ${met.length ? met.join("\n  ") : "none"}`
        + `\nits requests not ended: ${open.length ? open.join("\n  ") : "none"}`
        + (options.also ? `\n${options.also()}` : ""),
      { cause: error },
    );
  }
}

/**
 * A page in a new context of `browser` (see `newContext`) that records each dialog in `dialogs` as
 * `type: message`: a confirm() is accepted (the dashboard asks before revoking or deleting), anything
 * else dismissed (an alert is an XSS, which the tests look for).
 */
export async function openPage(browser: Browser, dialogs: string[]): Promise<{ context: BrowserContext; page: Page }> {
  const context = await newContext(browser);
  const page = await context.newPage();
  page.on("dialog", (dialog) => {
    dialogs.push(`${dialog.type()}: ${dialog.message()}`);
    void (dialog.type() === "confirm" ? dialog.accept() : dialog.dismiss());
  });
  return { context, page };
}
