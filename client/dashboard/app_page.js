// @ts-check
/**
 * An app's page: its state and scaling, its replicas per host, its deployments (activate one to roll back
 * or forward; each build log), its recent runs, and a form that calls one of its functions.
 */
import { api, call } from "./api.js";
import { badge, cell, errorBox, h, replace, table } from "./dom.js";
import { insightsSection } from "./app_insights.js";
import { callForm } from "./call_form.js";
import { duration, errorText, plural, when } from "./format.js";
import { link, rerender, runPath } from "./navigation.js";
import { deploymentsRefusedNote } from "./sandbox_status.js";
import { requireSession } from "./session.js";

/** @typedef {import("./types.js").App} App */
/** @typedef {import("./types.js").Deployment} Deployment */
/** @typedef {{ project_id: string; app_id: string }} AppPath */

/**
 * The app's `[hardware]`, and which replica holds which GPU.
 *
 * @param {App} app
 */
function hardwareFacts(app) {
  const hw = app.hardware;
  if (!hw) return null;
  const gpus = hw.gpu_count ? `, ${hw.gpu_count} GPU${hw.gpu_count === 1 ? "" : "s"}` : "";
  const held = app.replicas.gpus.map((replica) =>
    h(
      "div",
      { class: "mono" },
      `${replica.pid === null ? "starting replica" : `pid ${replica.pid}`}: `,
      replica.gpus.map((gpu) => `${gpu.id}${gpu.model ? ` (${gpu.model})` : ""}`).join(", "),
    )
  );
  return [
    h("dt", {}, "Hardware"),
    h("dd", {}, `${plural(hw.cpu, "core")}, ${hw.memory} GiB${gpus}${hw.compute ? ` (${hw.compute})` : ""}`),
    held.length ? [h("dt", {}, "GPUs held"), h("dd", { id: "gpus" }, held)] : null,
  ];
}

/**
 * The app's facts as a definition list.
 *
 * @param {App} app
 */
function appFacts(app) {
  return h(
    "dl",
    { class: "facts" },
    h("dt", {}, "Source"),
    h("dd", {}, app.source),
    h("dt", {}, "Runtime"),
    h("dd", {}, app.runtime ?? "–"),
    h("dt", {}, "Replicas"),
    h("dd", {}, `${app.replicas.busy} busy, ${app.replicas.idle} idle, ${app.replicas.starting} starting`),
    h("dt", {}, "Queued runs"),
    h("dd", {}, app.queued_runs),
    app.scaling
      ? [
        h("dt", {}, "Scaling"),
        h(
          "dd",
          {},
          `${app.scaling.min_replicas}–${plural(app.scaling.max_replicas, "replica")}, ${
            plural(app.scaling.replica_concurrency, "call")
          } each, cooldown ${app.scaling.cooldown} s`,
        ),
      ]
      : null,
    hardwareFacts(app),
    app.error ? [h("dt", {}, "Error"), h("dd", {}, app.error)] : null,
  );
}

/**
 * The app's replicas per host (a cluster's hosts, or this process alone): where each is, how many are
 * starting and ready, and their calls in flight against their slots. Null when no host has one.
 *
 * @param {App} app
 */
function hostsSection(app) {
  const { hosts } = app.replicas;
  if (hosts.length === 0) return null;
  return [
    h("h2", {}, "Replicas per host"),
    h(
      "div",
      { class: "scroll" },
      table(
        ["Host", "Starting", "Ready", "Calls / slots", "GPUs of the host"],
        hosts.map((host) =>
          h(
            "tr",
            { "data-host": host.host_id },
            cell(
              "Host",
              [host.url ?? host.host_id, host.this_host ? h("strong", { class: "this-host" }, " (this host)") : null],
              { class: "mono" },
            ),
            cell("Starting", host.starting, { class: "num" }),
            cell("Ready", host.ready, { class: "num" }),
            cell("Calls / slots", `${host.busy} / ${host.slots}`, { class: "num" }),
            cell("GPUs of the host", host.host_gpus, { class: "num" }),
          )
        ),
        {
          id: "replica-hosts",
          caption: "As the answering host last heard from each (up to a heartbeat old in a cluster).",
        },
      ),
    ),
  ];
}

/**
 * The OCI image a deployment runs in (`[build] base_image`): its reference, and the digest the build pulled;
 * "host system" without one. Both are tenant input, shown as text.
 *
 * @param {Deployment} d
 */
function imageCell(d) {
  if (!d.image) return h("td", { class: "muted" }, "host system");
  return h(
    "td",
    { class: "image" },
    h("div", { class: "mono image-reference" }, d.image.reference),
    h("div", { class: "mono muted image-digest", title: d.image.digest }, d.image.digest),
  );
}

/**
 * A deployment's row: its id (the active one marked), status, time, image, dependencies, build log and
 * activate.
 *
 * @param {AppPath} path
 * @param {Deployment} d
 * @param {HTMLElement} logs where a build log or a refusal shows
 */
function deploymentRow(path, d, logs) {
  const deployment = { ...path, deployment_id: d.deployment_id };
  return h(
    "tr",
    { "data-deployment": d.deployment_id },
    h(
      "td",
      { class: "mono" },
      d.deployment_id,
      d.active ? h("strong", {}, " (active)") : null,
      d.commit ? h("div", { class: "muted" }, `${d.commit.slice(0, 12)}${d.dirty ? " (dirty)" : ""}`) : null,
      d.message ? h("div", { class: "message" }, d.message) : null,
    ),
    h("td", {}, badge(d.status), d.error ? h("div", { class: "muted" }, d.error) : null),
    h("td", {}, when(d.created_at)),
    imageCell(d),
    h("td", {}, d.base_image_status ?? "–"),
    h(
      "td",
      { class: "row" },
      h("button", {
        type: "button",
        class: "secondary",
        onclick: async () => {
          const text = await call(
            api.GET("/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}/logs", {
              params: { path: deployment, header: { accept: "text/plain" } },
              parseAs: "text",
            }),
          );
          replace(logs, h("h2", {}, `Build log of ${d.deployment_id}`), h("pre", { class: "mono" }, text));
        },
      }, "Build log"),
      d.status === "ready" && !d.active
        ? h("button", {
          type: "button",
          onclick: async () => {
            const question = `Activate ${d.deployment_id}? New calls to ${d.app_id} run it from now on (a rollback,`
              + " or a roll forward); calls in flight finish on the one they started on.";
            if (!confirm(question)) return;
            try {
              await call(
                api.POST("/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}/activate", {
                  params: { path: deployment },
                }),
              );
              void rerender();
            } catch (error) {
              replace(logs, errorBox(error));
            }
          },
        }, "Activate")
        : null,
    ),
  );
}

/**
 * The app's deployments (the last 20) with their build logs.
 *
 * @param {AppPath} path
 */
async function deploymentsSection(path) {
  const [page, refused] = await Promise.all([
    call(api.GET("/v3/projects/{project_id}/apps/{app_id}/deployments", { params: { path, query: { limit: 20 } } })),
    deploymentsRefusedNote(),
  ]);
  const logs = h("div");
  const columns = ["Deployment", "Status", "Created", "Image", "Dependencies", ""];
  const rows = page.deployments.map((d) => deploymentRow(path, d, logs));
  // Each cell names its column: on a phone the table is one card per deployment (style.css).
  for (const row of rows) [...row.children].forEach((cell, i) => cell.setAttribute("data-label", columns[i]));
  return [
    h("h2", {}, "Deployments"),
    refused,
    h("div", { class: "scroll" }, table(columns, rows, { bodyId: "deployments", className: "deployments" })),
    logs,
  ];
}

/**
 * The app's ten most recent runs.
 *
 * @param {AppPath} path
 */
async function recentRuns(path) {
  const recent = await call(
    api.GET("/v4/projects/{project_id}/apps/{app_id}/runs", { params: { path, query: { limit: 10 } } }),
  );
  return [
    h("h2", {}, "Recent runs"),
    recent.runs.length
      ? table(
        ["Run", "Function", "Status", "Error", "Created", "Run time"],
        recent.runs.map((run) =>
          h(
            "tr",
            { "data-run": run.run_id },
            cell("Run", link(runPath(run), run.run_id), { class: "mono" }),
            cell("Function", run.function_name, { class: "mono" }),
            cell("Status", badge(run.status)),
            cell("Error", h("span", {}, run.error ? errorText(run.error) : ""), {
              class: run.error ? "err" : "err none",
              title: run.error ? errorText(run.error) : undefined,
            }),
            cell("Created", when(run.created_at)),
            cell("Run time", duration(run.run_time_ms), { class: "num" }),
          )
        ),
        { id: "recent-runs", className: "runs" },
      )
      : h("p", { class: "muted" }, "No runs yet: call a function below."),
    h("p", {}, link(`/runs?app=${encodeURIComponent(path.app_id)}`, "All runs of this app →")),
  ];
}

/**
 * The page's nodes for app `appId`.
 *
 * @param {string} appId
 */
export async function appPage(appId) {
  const { project_id: projectId } = requireSession();
  const path = { project_id: projectId, app_id: appId };
  const app = await call(api.GET("/v3/projects/{project_id}/apps/{app_id}", { params: { path } }));
  return [
    h("p", {}, link("/apps", "← Apps")),
    h("h1", {}, appId, " ", badge(app.state)),
    appFacts(app),
    hostsSection(app),
    app.source === "deployment" ? await deploymentsSection(path) : null,
    insightsSection(path),
    await recentRuns(path),
    callForm(appId),
  ];
}
