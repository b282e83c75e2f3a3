// @ts-check
/**
 * The runs page, a triage view: every app's runs newest first in one paged listing (`listProjectRuns`),
 * filtered by app, function, status, mode and creation time, with each failed run's error and its run
 * time; lookup by run id; live while it shows the newest page.
 */
import { api, call } from "./api.js";
import { badge, cell, errorBox, h, replace, table } from "./dom.js";
import { duration, errorText, when } from "./format.js";
import { followRuns } from "./live.js";
import { go, link, runPath } from "./navigation.js";
import { filterForm, filtersPath, listQuery, readFilters, statusLinks } from "./run_filters.js";
import { requireSession } from "./session.js";

/** @typedef {import("./types.js").RunSummary} RunSummary */

/**
 * The names of the project's apps.
 *
 * @param {string} projectId
 */
export async function appNames(projectId) {
  const data = await call(api.GET("/v3/projects/{project_id}/apps", { params: { path: { project_id: projectId } } }));
  return data.apps.map((a) => a.app_id);
}

/**
 * One run's row.
 *
 * @param {RunSummary} run
 */
function runRow(run) {
  const error = run.error ? errorText(run.error) : null;
  return h(
    "tr",
    { "data-run": run.run_id },
    cell("Run", link(runPath(run), run.run_id), { class: "mono" }),
    cell("App", run.app_id),
    cell("Function", run.function_name, { class: "mono" }),
    cell("Status", badge(run.status)),
    cell("Mode", run.mode),
    cell("Error", h("span", {}, error ?? ""), { class: error ? "err" : "err none", title: error ?? undefined }),
    cell("Created", when(run.created_at)),
    cell("Run time", duration(run.run_time_ms), { class: "num" }),
  );
}

/**
 * A form that opens a run by its id: the id alone does not say its app, so each app is asked in turn.
 *
 * @param {string} projectId
 * @param {string[]} apps
 */
function lookupForm(projectId, apps) {
  const input = h("input", { id: "lookup", name: "run_id", placeholder: "run_01…", size: 30, autocomplete: "off" });
  const outcome = h("div");
  return h(
    "form",
    {
      class: "filters",
      /** @param {SubmitEvent} event */
      onsubmit: async (event) => {
        event.preventDefault();
        outcome.replaceChildren();
        const id = input.value.trim();
        for (const app of apps) {
          const { response } = await api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
            params: { path: { project_id: projectId, app_id: app, run_id: id } },
          });
          if (response.ok) return go(`/dashboard${runPath({ run_id: id, app_id: app })}`);
        }
        outcome.append(errorBox(new Error(`No run ${id} in this project`)));
      },
    },
    h("label", { for: "lookup" }, "Find a run by id", input),
    h("button", { type: "submit", class: "secondary" }, "Find"),
    outcome,
  );
}

/**
 * The runs of one page of the listing, and the links to the pages around it.
 *
 * @param {import("./run_filters.js").RunFilters} filters
 * @param {import("./types.js").Schemas["RunPage"]} page
 * @param {{ anyApp: boolean }} options `anyApp`: whether the project has apps at all
 */
function listing(filters, page, options) {
  const list = page.runs.length
    ? table(
      ["Run", "App", "Function", "Status", "Mode", "Error", "Created", "Run time"],
      page.runs.map(runRow),
      { id: "runs-table", bodyId: "runs", className: "runs", caption: "Runs of every app, newest first" },
    )
    : h(
      "p",
      { class: "muted", id: "no-runs" },
      options.anyApp
        ? "No runs match: call an app, or clear the filters."
        : "No apps yet: deploy one with runplane deploy.",
    );
  return [
    list,
    h(
      "p",
      { class: "row pager" },
      filters.cursor ? link(filtersPath(filters, { cursor: "" }), "← Newest runs") : null,
      page.next_cursor ? link(filtersPath(filters, { cursor: page.next_cursor }), "Older runs →") : null,
    ),
  ];
}

/**
 * The page's nodes for the address's query. While it shows the newest runs it follows the project's
 * run changes, and reads the listing again (the listing alone: a filter being chosen stays as it is).
 *
 * @param {URLSearchParams} params
 */
export async function runsPage(params) {
  const { project_id: projectId } = requireSession();
  const filters = readFilters(params);
  const read = () =>
    call(api.GET("/v4/projects/{project_id}/runs", {
      params: { path: { project_id: projectId }, query: listQuery(filters, Date.now()) },
    }));
  const [apps, page] = await Promise.all([appNames(projectId), read()]);
  const area = h("div", { id: "runs-listing" }, listing(filters, page, { anyApp: apps.length > 0 }));
  if (!filters.cursor) {
    followRuns(projectId, {
      matters: (change) =>
        (!filters.app || change.app_id === filters.app) && (!filters.fn || change.function_name === filters.fn),
      reread: async () => replace(area, listing(filters, await read(), { anyApp: apps.length > 0 })),
    });
  }
  // The lookup above the listing (50 rows a page), where it is seen without scrolling.
  return [h("h1", {}, "Runs"), lookupForm(projectId, apps), filterForm(filters, { apps }), statusLinks(filters), area];
}
