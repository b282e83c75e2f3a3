// @ts-check
/**
 * Moving between the dashboard's pages without reloading: the address changes (so every view can be
 * bookmarked and shared) and the shell renders the page its path names. The shell registers how it
 * renders (`setRenderer`), so the pages that navigate need not import it.
 */
import { h } from "./dom.js";

/** @typedef {{ keepLive?: boolean }} RenderOptions */

/** @type {(options?: RenderOptions) => Promise<void>} */
let renderPage = async () => {};

/**
 * Sets what renders the page of the current address.
 *
 * @param {(options?: RenderOptions) => Promise<void>} renderer
 */
export function setRenderer(renderer) {
  renderPage = renderer;
}

/**
 * Renders the current page again (after an action changed what it shows).
 *
 * @param {RenderOptions} [options] `keepLive` keeps the page's open run-change feed
 */
export function rerender(options) {
  return renderPage(options);
}

/**
 * Goes to `url` (a path of the dashboard) and renders it.
 *
 * @param {string} url
 * @param {{ replace?: boolean }} [options] `replace` replaces the history entry instead of adding one
 */
export function go(url, options = {}) {
  if (options.replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  void renderPage();
}

/**
 * A link's click as navigation inside the page; a click meant for a new tab or window is left alone.
 *
 * @param {MouseEvent} event
 */
export function navigate(event) {
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
  const target = /** @type {HTMLAnchorElement} */ (event.currentTarget);
  event.preventDefault();
  go(target.getAttribute("href") ?? "/dashboard");
}

/**
 * A link to a page of the dashboard. `path` is always the dashboard's own (a value from a run can never
 * become a URL scheme such as `javascript:`): callers encode each value they put in it.
 *
 * @param {string} path below `/dashboard`, e.g. `/runs?app=hello`
 * @param {import("./types.js").Child} text
 * @param {Record<string, unknown>} [attrs]
 */
export function link(path, text, attrs = {}) {
  return h("a", { href: `/dashboard${path}`, onclick: navigate, ...attrs }, text);
}

/**
 * The path of a run's page.
 *
 * @param {{ run_id: string; app_id: string }} run
 */
export function runPath(run) {
  return `/runs/${encodeURIComponent(run.run_id)}?app=${encodeURIComponent(run.app_id)}`;
}
