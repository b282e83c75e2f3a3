// @ts-check
/**
 * The page's live feeds (server-sent events, authenticated by the session cookie): the project's run
 * changes, which re-read the page shown, and a running run's log. Showing another page closes them.
 */
import { rerender } from "./navigation.js";

/** @typedef {import("./types.js").RunChange} RunChange */

/** The open run-change feed of the page shown. */
/** @type {EventSource | null} */
let changes = null;
/** The open log feed of a running run's page. */
/** @type {EventSource | null} */
let log = null;

/**
 * Closes the page's feeds: the log always, the run-change feed unless `keepChanges`.
 *
 * @param {{ keepChanges?: boolean }} [options]
 */
export function closeFeeds(options = {}) {
  log?.close();
  log = null;
  if (!options.keepChanges) {
    changes?.close();
    changes = null;
  }
}

/** Whether a pointer is pressed on the page: a click under way (see `afterPress`). */
let pressed = false;
/** Counts presses, so that a release's late turn does not end a press begun after it. */
let presses = 0;
/** @type {Array<() => void>} those waiting for the press to end */
let released = [];
/** The longest a refresh waits for a press to end (a release the page never hears of). */
const MAX_PRESS_WAIT_MS = 5_000;

addEventListener("pointerdown", () => {
  pressed = true;
  presses++;
}, { capture: true });
for (const type of ["pointerup", "pointercancel"]) {
  addEventListener(type, () => {
    const press = presses;
    // A turn later, so that the click this release makes reaches the element that was pressed first.
    setTimeout(() => {
      if (press !== presses) return;
      pressed = false;
      const waiting = released;
      released = [];
      for (const resolve of waiting) resolve();
    });
  }, { capture: true });
}

/**
 * Resolves once no pointer is pressed on the page (or after `MAX_PRESS_WAIT_MS`). A background refresh
 * waits for it before it replaces the page: replaced between a button's press and its release, the
 * release lands on the new button and no click is made, so the click would be lost.
 *
 * @returns {Promise<void>}
 */
export function afterPress() {
  if (!pressed) return Promise.resolve();
  return new Promise((resolve) => {
    released.push(resolve);
    setTimeout(resolve, MAX_PRESS_WAIT_MS);
  });
}

/** Whether the page follows the run changes already. */
export function followingRuns() {
  return changes !== null;
}

/** Whether someone is typing in the page (a refresh would take their input away). */
function typing() {
  const active = document.activeElement;
  return active !== null && document.getElementById("main")?.contains(active) === true
    && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
}

/**
 * Follows the project's run changes: each change that `matters`, and the feed's opening, calls `reread` a
 * moment later (changes in a burst are read once), unless someone is typing in the page. `reread` reads
 * again what the page shows; the default renders the whole page again.
 *
 * @param {string} projectId
 * @param {{ matters: (change: RunChange) => boolean; reread?: () => Promise<void> }} options
 */
export function followRuns(projectId, options) {
  const { matters, reread = () => rerender({ keepLive: true }) } = options;
  changes?.close();
  const feed = new EventSource(`/v4/projects/${encodeURIComponent(projectId)}/runs/events`);
  changes = feed;
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer;
  const refresh = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (changes !== feed) return;
      if (typing()) return refresh();
      void reread().catch(() => {});
    }, 250);
  };
  feed.addEventListener("message", (event) => {
    if (matters(/** @type {RunChange} */ (JSON.parse(event.data)))) refresh();
  });
  feed.addEventListener("resync", refresh);
  // The page was read before this feed was open: a change in between (a quick run ending) would be
  // missed, so read it once more when the feed opens.
  feed.addEventListener("open", refresh);
}

/**
 * Follows a running run's log at `url`: `onLine` with each line (from the first), until the run ends.
 *
 * @param {string} url
 * @param {(line: import("./types.js").RunLogLine, first: boolean) => void} onLine
 */
export function followLog(url, onLine) {
  log?.close();
  const feed = new EventSource(url);
  log = feed;
  let first = true;
  feed.addEventListener("message", (event) => {
    onLine(JSON.parse(event.data), first);
    first = false;
  });
  feed.addEventListener("end", () => feed.close());
}
