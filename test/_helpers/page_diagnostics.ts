/**
 * What a browser test's page met, told when one of its waits times out: the page's address and main
 * text, whether it crashed, its console errors, failed requests and 5xx answers, the requests it began
 * that never ended, and the test server's own requests and warnings since the page's last navigation.
 * CI has timed out waiting for a dashboard page that never showed (a sign-in form, a runs list) with
 * nothing to tell which side stalled; these say it.
 */
import type { BrowserContext, Locator, Page, Request } from "playwright-core";

/** A test server's account of itself since a moment (`TestServer.recentLogs`). */
export interface ServerLog {
  recentLogs(sinceMs: number): string;
}

interface Watched {
  /** The last 20 troubles: console errors and warnings, page errors, a crash, failed requests, 5xx. */
  troubles: string[];
  /** The requests begun and not ended, with when each began. */
  pending: Map<Request, number>;
  /** When the page's last navigation began (Unix ms). */
  navigatedAt: number;
  server?: ServerLog;
}

const watched = new WeakMap<Page, Watched>();

/** Records what `page` meets, for `describePage`; `server` is the test server it talks to. */
export function watchPage(page: Page, server?: ServerLog): void {
  const state: Watched = { troubles: [], pending: new Map(), navigatedAt: Date.now(), server };
  watched.set(page, state);
  const note = (line: string) => {
    state.troubles.push(line.slice(0, 300));
    if (state.troubles.length > 20) state.troubles.shift();
  };
  page.on("console", (message) => {
    if (message.type() === "error" || message.type() === "warning") {
      note(`console ${message.type()}: ${message.text()}`);
    }
  });
  page.on("pageerror", (error) => note(`page error: ${error.message}`));
  page.on("crash", () => note("the page crashed"));
  page.on("response", (response) => {
    if (response.status() >= 500) note(`${response.status()}: ${response.request().method()} ${response.url()}`);
  });
  page.on("request", (request) => {
    state.pending.set(request, Date.now());
    if (request.isNavigationRequest() && request.frame() === page.mainFrame()) state.navigatedAt = Date.now();
  });
  page.on("requestfinished", (request) => state.pending.delete(request));
  page.on("requestfailed", (request) => {
    state.pending.delete(request);
    note(`failed: ${request.method()} ${request.url()} (${request.failure()?.errorText})`);
  });
  explainTimeouts(page);
}

/** How many descriptions are being written: their own reads of the page must not be explained again. */
let describing = 0;

/** What `page` shows and met (see the module's comment), in lines. */
export async function describePage(page: Page): Promise<string> {
  describing++;
  try {
    const state = watched.get(page);
    const main = await page.locator("main").innerText({ timeout: 5_000 }).catch((e: Error) =>
      `(unreadable: ${e.message.split("\n")[0]})`
    );
    const now = Date.now();
    const open = [...(state?.pending ?? [])].map(([request, began]) =>
      `${request.method()} ${request.url()} (${((now - began) / 1000).toFixed(1)} s)`
    );
    const lines = [
      `the page at ${page.url()} shows: ${JSON.stringify(main.slice(0, 600))}`,
      `its troubles: ${state?.troubles.length ? state.troubles.join("\n  ") : "none"}`,
      `its requests not ended: ${open.length ? open.join("\n  ") : "none"}`,
    ];
    if (state?.server) lines.push(state.server.recentLogs(state.navigatedAt - 1_000));
    return lines.join("\n");
  } finally {
    describing--;
  }
}

/** The Locator and Page methods that wait, whose timeouts `explainTimeouts` explains. */
const WAITING = {
  locator: ["waitFor", "click", "fill", "check", "uncheck", "selectOption", "textContent", "innerText", "inputValue"],
  page: ["goto", "reload", "waitForURL", "waitForSelector"],
} as const;

/** The prototypes already patched. */
const patched = new WeakSet<object>();

/**
 * Makes every waiting method of Playwright's pages and locators add `describePage` to its TimeoutError
 * (and a navigation dropped for a network change go once more: `navigatedAgainIfNetworkChanged`).
 * A patch of their prototypes (once, from the first watched page): Playwright has no hook for a wait that
 * times out, and wrapping each of the suite's ~200 waits would bury what they test.
 */
function explainTimeouts(page: Page): void {
  const targets: Array<[object, readonly string[], (self: never) => Page]> = [
    [Object.getPrototypeOf(page.locator("html")), WAITING.locator, (self: Locator) => self.page()],
    [Object.getPrototypeOf(page), WAITING.page, (self: Page) => self],
  ];
  for (const [prototype, names, pageOf] of targets) {
    if (patched.has(prototype)) continue;
    patched.add(prototype);
    const methods = prototype as Record<string, (...args: unknown[]) => Promise<unknown>>;
    for (const name of names) {
      const original = methods[name];
      methods[name] = async function(this: never, ...args: unknown[]) {
        try {
          return await navigatedAgainIfNetworkChanged(name, () => original.apply(this, args));
        } catch (error) {
          if (describing > 0 || (error as Error).name !== "TimeoutError") throw error;
          const described = await describePage(pageOf(this)).catch((e: Error) => `(not described: ${e.message})`);
          (error as Error).message += `\n${described}`;
          throw error;
        }
      };
    }
  }
}

/**
 * Runs `wait` (the method `name`) and, when it is a navigation that Chromium abandoned with
 * net::ERR_NETWORK_CHANGED, runs it once more. Chromium drops a navigation in flight when the host's
 * network interfaces or addresses change, and CI's machine changed them under a dashboard test (the
 * sandbox tests' peer hosts add veth pairs beside it, and CI's own network may change): a navigation
 * repeated, not an assertion eased. Any other failure, and a second one, is thrown as it came.
 */
async function navigatedAgainIfNetworkChanged(name: string, wait: () => Promise<unknown>): Promise<unknown> {
  try {
    return await wait();
  } catch (error) {
    if ((name !== "goto" && name !== "reload") || !String((error as Error).message).includes("ERR_NETWORK_CHANGED")) {
      throw error;
    }
    process.stderr.write(`(${name} met net::ERR_NETWORK_CHANGED; navigating once more)\n`);
    return await wait();
  }
}

/** Watches each page `context` opens (see `watchPage`). */
export function watchContext(context: BrowserContext, server?: ServerLog): void {
  context.on("page", (page) => watchPage(page, server));
}
