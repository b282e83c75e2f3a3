// @ts-check
/**
 * A run's page: its facts, its result or error, its logs, its webhook, and what can be done with it
 * (cancel, run again, copy as curl).
 */
import { api, call } from "./api.js";
import { badge, copyButton, errorBox, h, jsonBlock } from "./dom.js";
import { curlCommand } from "./curl.js";
import { duration, when } from "./format.js";
import { followingRuns, followRuns } from "./live.js";
import { go, link, rerender, runPath } from "./navigation.js";
import { errorSection, logSection, unfinished, webhookSection, websocketSection } from "./run_sections.js";
import { requireSession } from "./session.js";

/** @typedef {import("./types.js").Run} Run */

/**
 * The run's facts as a definition list.
 *
 * @param {Run} run
 */
function facts(run) {
  /** @type {Array<[string, import("./types.js").Child, string?]>} */
  const rows = [
    ["Status", badge(run.status), "status"],
    ["App", link(`/apps/${encodeURIComponent(run.app_id)}`, run.app_id)],
    ["Function", run.function_name],
    ["Mode", run.mode],
    ["Created", when(run.created_at)],
    ["Started", when(run.started_at)],
    ["Ended", when(run.completed_at)],
    ["Queue time", duration(run.queue_time_ms)],
    ["Run time", duration(run.run_time_ms), "run-time"],
    ["Deployment", run.deployment_id ?? "–", "deployment"],
  ];
  return h("dl", { class: "facts" }, rows.map(([name, value, id]) => [h("dt", {}, name), h("dd", { id }, value)]));
}

/**
 * The buttons that act on the run, and where their errors show.
 *
 * @param {Run} run
 * @param {{ project_id: string; app_id: string; run_id: string }} path
 */
function actions(run, path) {
  const row = h("div", { class: "row", id: "actions" });
  if (run.mode === "async" && run.input !== null && !unfinished(run)) {
    row.append(h("button", {
      type: "button",
      onclick: async () => {
        try {
          const answer = await call(api.POST("/v4/{project_id}/{app_name}/{function_name}", {
            params: {
              path: { project_id: run.project_id, app_name: run.app_id, function_name: run.function_name },
              query: { async: true, rerunOf: run.run_id },
            },
            body: /** @type {Record<string, never>} */ (run.input),
          }));
          // An async call answers 202 with the new run's id.
          const accepted = /** @type {import("./types.js").Schemas["RunAccepted"]} */ (answer);
          go(`/dashboard${runPath({ run_id: accepted.run_id, app_id: run.app_id })}`);
        } catch (error) {
          row.append(errorBox(error));
        }
      },
    }, "Run again"));
  }
  if (unfinished(run)) {
    row.append(h("button", {
      type: "button",
      class: "danger",
      onclick: async () => {
        if (!confirm(`Cancel ${run.run_id}? Its function is stopped and the run ends cancelled.`)) return;
        try {
          await call(api.DELETE("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", { params: { path } }));
          void rerender();
        } catch (error) {
          row.append(errorBox(error));
        }
      },
    }, "Cancel run"));
  }
  // A WebSocket is not replayed by a curl command.
  if (run.mode === "websocket") return [row];
  const curl = curlCommand(run, { baseUrl: location.origin });
  row.append(copyButton(curl, { label: "Copy as curl", caption: "Copy as curl", id: "copy-curl" }));
  return [
    row,
    h(
      "details",
      { class: "curl" },
      h("summary", {}, "curl (the token read from $RUNPLANE_TOKEN)"),
      h("pre", { class: "mono", id: "curl" }, curl),
    ),
  ];
}

/**
 * Links to the run this one ran again, and to the runs that ran it again.
 *
 * @param {Run} run
 */
function reruns(run) {
  if (!run.rerun_of && !run.reruns.length) return null;
  /** @param {string} id */
  const to = (id) => link(runPath({ run_id: id, app_id: run.app_id }), id);
  return h(
    "p",
    { id: "reruns" },
    run.rerun_of ? ["Runs again ", to(run.rerun_of), ". "] : null,
    run.reruns.length ? ["Run again as ", run.reruns.map((id, i) => [i ? ", " : "", to(id)]), "."] : null,
  );
}

/**
 * The run's input, result or error, as far as they are kept.
 *
 * @param {Run} run
 */
function outcome(run) {
  const sections = [];
  if (run.mode === "async") {
    sections.push(h("h2", {}, "Input"));
    sections.push(
      run.input === null
        ? h("p", { class: "muted" }, "The input has expired with the result.")
        : jsonBlock(run.input, { id: "input" }),
    );
  }
  if (run.status === "success" && run.mode !== "websocket") {
    sections.push(h("h2", {}, "Result"));
    sections.push(
      run.result_expired
        ? h("p", { class: "muted" }, "The result has expired.")
        : jsonBlock(run.result, { id: "result" }),
    );
    if (run.result_truncated) {
      sections.push(h("p", { class: "muted" }, "The stored result was cut at the server's limit."));
    }
  }
  if (run.websocket) sections.push(...websocketSection(run.websocket));
  if (run.error) sections.push(...errorSection(run.error));
  return sections;
}

/**
 * The page's nodes for run `runId` of the app the address names.
 *
 * @param {string} runId
 * @param {URLSearchParams} params
 */
export async function runPage(runId, params) {
  const { project_id: projectId } = requireSession();
  const app = params.get("app");
  if (!app) throw new Error("Open a run from the runs list (its app is needed)");
  const path = { project_id: projectId, app_id: app, run_id: runId };
  const run = await call(api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", { params: { path } }));
  // Only a run that has not ended changes: a finished run's page stays as it was read.
  if (unfinished(run) && !followingRuns()) followRuns(projectId, { matters: (change) => change.run_id === runId });
  return [
    h("p", {}, link(`/runs?app=${encodeURIComponent(app)}`, "← Runs")),
    h(
      "h1",
      {},
      "Run ",
      h("span", { class: "mono", id: "run-id" }, run.run_id),
      " ",
      copyButton(run.run_id, { label: "Copy run id" }),
    ),
    facts(run),
    actions(run, path),
    reruns(run),
    outcome(run),
    h("h2", {}, "Logs"),
    await logSection(path, run),
    run.webhook ? webhookSection(path, run, run.webhook) : null,
  ];
}
