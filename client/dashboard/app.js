// @ts-check
/**
 * The Runplane dashboard's shell: ES modules loaded by the browser as they are (no bundler, no build
 * step), one per page. It reads the session, shows the page the address names, keeps the navigation
 * (hidden while signed out) and the sandbox warning. Every page calls only the public REST and run APIs
 * (`api.js`), and puts every value from the server on the page as text (`dom.js`).
 */
import { SignedOut } from "./api.js";
import { appPage } from "./app_page.js";
import { appsPage } from "./apps_page.js";
import { byId, errorBox, h, replace } from "./dom.js";
import { keysPage } from "./keys_page.js";
import { afterPress, closeFeeds } from "./live.js";
import { go, navigate, setRenderer } from "./navigation.js";
import { runPage } from "./run_page.js";
import { runsPage } from "./runs_page.js";
import { unjailedWarning } from "./sandbox_status.js";
import { secretsPage } from "./secrets_page.js";
import { loadSession, signOut } from "./session.js";
import { signInPage } from "./signin_page.js";
import { volumesPage } from "./volumes_page.js";

/**
 * The nodes of the page `route` names (the path below `/dashboard`, split at `/`).
 *
 * @param {string[]} route
 * @param {URLSearchParams} params
 * @returns {Promise<import("./types.js").Child[]>}
 */
async function pageOf(route, params) {
  const [section, id] = route;
  if (section === "apps") return id ? await appPage(id) : await appsPage();
  if (section === "keys") return await keysPage();
  if (section === "secrets") return await secretsPage();
  if (section === "volumes") return await volumesPage();
  if (section === "runs" && id) return await runPage(id, params);
  return await runsPage(params);
}

/**
 * Shows the navigation of a signed-in session, the current section marked.
 *
 * @param {import("./types.js").Session} session
 * @param {string} section
 */
function showNavigation(session, section) {
  const nav = byId("nav");
  nav.hidden = false;
  byId("who").textContent = `${session.project_id} · ${session.scopes.join(", ")}`;
  for (const a of nav.querySelectorAll("a[data-nav]")) {
    if (a instanceof HTMLElement && a.dataset.nav === section) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

/**
 * The page shown instead of one that could not be read: what went wrong, and a button that reads it again.
 *
 * @param {string} title
 * @param {unknown} error
 */
function failedPage(title, error) {
  return [
    h("h1", {}, title),
    errorBox(error),
    h("p", {}, h("button", { type: "button", id: "try-again", onclick: () => void render() }, "Try again")),
  ];
}

/** How many renders began: the latest one's page is shown. */
let renders = 0;

/**
 * Renders the page of the current address.
 *
 * @param {import("./navigation.js").RenderOptions} [options] `keepLive` keeps the run-change feed open
 */
async function render(options = {}) {
  const mine = ++renders;
  closeFeeds({ keepChanges: options.keepLive });
  const main = byId("main");
  const url = new URL(location.href);
  const route = url.pathname.replace(/^\/dashboard\/?/, "").split("/").map(decodeURIComponent);
  /** @type {import("./types.js").Session | null} */
  let session;
  try {
    session = await loadSession();
  } catch (error) {
    if (mine === renders) replace(main, ...failedPage("The server cannot be reached", error));
    return;
  }
  if (!session) {
    byId("nav").hidden = true;
    if (route[0] !== "signin") history.replaceState(null, "", "/dashboard/signin");
    replace(main, signInPage());
    document.title = "Sign in · Runplane";
    return;
  }
  showNavigation(session, route[0] || "runs");
  try {
    const nodes = await pageOf(route, url.searchParams);
    // A live feed's re-read waits for a click under way: the page replaced under it would lose the click.
    if (options.keepLive) await afterPress();
    // A page read while another was asked for (a click during a slow read) is not shown over it.
    if (mine !== renders) return;
    replace(main, nodes);
    document.title = `${main.querySelector("h1")?.textContent ?? "Runplane"} · Runplane`;
  } catch (error) {
    if (mine === renders && !(error instanceof SignedOut)) replace(main, ...failedPage("Something went wrong", error));
  }
}

/** How long the shell waits before it asks a server that is not ready again (then twice as long, to a minute). */
const NOT_READY_RETRY_MS = 1_000;

/**
 * Says loudly when this server runs tenants' code unjailed, or refuses deployments because it would (its
 * /readyz tells). A server not ready yet (503: its store or its apps folder still starting) is asked
 * again until it is, so the warning shows on the page already open, not only after a reload.
 */
async function warnWhenUnjailed() {
  let warning = await unjailedWarning();
  for (let wait = NOT_READY_RETRY_MS; warning === undefined; wait = Math.min(wait * 2, 60_000)) {
    await new Promise((resolve) => setTimeout(resolve, wait));
    warning = await unjailedWarning();
  }
  if (!warning) return;
  const banner = byId("sandbox-warning");
  banner.textContent = warning;
  banner.hidden = false;
}

setRenderer(render);
byId("signout").addEventListener("click", async () => {
  await signOut();
  go("/dashboard/signin", { replace: true });
});
for (const a of document.querySelectorAll("a[href^='/dashboard']")) {
  if (a instanceof HTMLAnchorElement) a.addEventListener("click", navigate);
}
addEventListener("popstate", () => void render());
void render();
void warnWhenUnjailed();
