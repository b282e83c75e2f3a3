// @ts-check
/** The apps page: each app of the project with its state, source, runtime, replicas and queue. */
import { api, call } from "./api.js";
import { badge, h, table } from "./dom.js";
import { link } from "./navigation.js";
import { deploymentsRefusedNote } from "./sandbox_status.js";
import { requireSession } from "./session.js";

/** The page's nodes. */
export async function appsPage() {
  const { project_id: projectId } = requireSession();
  const [data, refused] = await Promise.all([
    call(api.GET("/v3/projects/{project_id}/apps", { params: { path: { project_id: projectId } } })),
    deploymentsRefusedNote(),
  ]);
  if (!data.apps.length) {
    return [
      h("h1", {}, "Apps"),
      refused,
      h("p", { class: "muted" }, `No apps yet: runplane deploy ./my-app --project ${projectId}`),
    ];
  }
  return [
    h("h1", {}, "Apps"),
    refused,
    h(
      "div",
      { class: "scroll" },
      table(
        ["App", "State", "Source", "Runtime", "Replicas (busy/idle/starting)", "Queued runs"],
        data.apps.map((a) =>
          h(
            "tr",
            {},
            h("td", {}, link(`/apps/${encodeURIComponent(a.app_id)}`, a.app_id)),
            h("td", {}, badge(a.state)),
            h("td", {}, a.source),
            h("td", {}, a.runtime ?? "–"),
            h("td", {}, `${a.replicas.busy}/${a.replicas.idle}/${a.replicas.starting}`),
            h("td", {}, a.queued_runs),
          )
        ),
      ),
    ),
  ];
}
