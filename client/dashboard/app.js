// The Runplane dashboard: one ES module, no bundler. It calls only the public REST and run APIs through
// openapi-fetch (the generated client's transport), authenticated by the session cookie the server set
// at sign-in. Every value from the server is put on the page as text (textContent), never as HTML.
import createClient from "/dashboard/assets/openapi-fetch.mjs";

const api = createClient({ baseUrl: location.origin, credentials: "same-origin" });
const main = document.getElementById("main");
const STATUSES = ["queued", "running", "success", "failure", "cancelled"];
const MODES = ["sync", "async", "stream"];
let session = null;
/** The open run-change stream of the page shown, closed when another page is shown. */
let live = null;
/** The open log stream of a running run's page. */
let logStream = null;

/** An element with attributes (`on*` functions become listeners) and children (strings become text). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** A link inside the dashboard; only our own paths, so a value from a run can never become a URL scheme. */
function link(path, text, attrs = {}) {
  return h("a", { href: `/dashboard${path}`, onclick: navigate, ...attrs }, text);
}

function navigate(event) {
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  go(event.currentTarget.getAttribute("href"));
}

function go(url, options = {}) {
  if (options.replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  void render();
}

function show(...nodes) {
  main.replaceChildren(...nodes.flat().filter((node) => node !== null && node !== undefined && node !== false));
}

function problemText(error, response) {
  if (response?.status === 401) return "Your session ended or its token was revoked: sign in again.";
  if (error && typeof error === "object" && "title" in error) {
    return `${error.title}${error.detail ? `: ${error.detail}` : ""}`;
  }
  return `The server answered ${response?.status ?? "nothing"}; check that it runs and try again.`;
}

/** Unwraps an openapi-fetch answer; a 401 goes back to sign-in. */
async function call(promise) {
  const { data, error, response } = await promise;
  if (response.status === 401) {
    session = null;
    go("/dashboard/signin", { replace: true });
    throw new Error("signed out");
  }
  if (!response.ok) throw new Error(problemText(error, response));
  return data;
}

function errorBox(error) {
  return h("p", { class: "error", role: "alert" }, error.message ?? String(error));
}

function badge(status) {
  return h("span", { class: `badge s-${status}` }, status);
}

/** A relative time, with the absolute time in the viewer's zone on hover. */
function when(iso) {
  if (!iso) return h("span", { class: "muted" }, "–");
  const at = new Date(iso);
  const seconds = Math.round((Date.now() - at.getTime()) / 1000);
  if (seconds < -5) {
    const ahead = -seconds;
    const future = ahead < 3600
      ? `in ${Math.round(ahead / 60)} min`
      : ahead < 86400
      ? `in ${Math.round(ahead / 3600)} h`
      : `in ${Math.round(ahead / 86400)} days`;
    return h("time", { datetime: iso, title: at.toLocaleString() }, future);
  }
  const text = seconds < 5
    ? "just now"
    : seconds < 60
    ? `${seconds} s ago`
    : seconds < 3600
    ? `${Math.round(seconds / 60)} min ago`
    : seconds < 86400
    ? `${Math.round(seconds / 3600)} h ago`
    : at.toLocaleDateString();
  return h("time", { datetime: iso, title: at.toLocaleString() }, text);
}

function ms(value) {
  return value === null || value === undefined ? "–" : `${value.toFixed(1)} ms`;
}

function copyButton(text, label) {
  return h("button", {
    type: "button",
    class: "secondary",
    "aria-label": label,
    onclick: async (event) => {
      await navigator.clipboard?.writeText(text).catch(() => {});
      event.currentTarget.textContent = "Copied";
    },
  }, "Copy");
}

/** JSON pretty-printed; long values folded behind a disclosure. */
function jsonBlock(value) {
  const text = JSON.stringify(value, null, 2) ?? "null";
  const pre = h("pre", { class: "mono" }, text);
  if (text.length < 2000) return pre;
  return h("details", {}, h("summary", {}, `Show ${text.length.toLocaleString()} characters`), pre);
}

// ---- Pages ----

function signInPage() {
  const error = h("div");
  const input = h("textarea", { id: "token", name: "token", required: true, autocomplete: "off", spellcheck: "false" });
  const form = h(
    "form",
    {
      class: "stack",
      onsubmit: async (event) => {
        event.preventDefault();
        error.replaceChildren();
        const response = await fetch("/dashboard/session", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ token: input.value }),
        });
        if (!response.ok) {
          const problem = await response.json().catch(() => null);
          error.replaceChildren(errorBox(new Error(problem?.detail ?? "Sign-in failed")));
          return;
        }
        input.value = "";
        session = await response.json();
        go("/dashboard/runs", { replace: true });
      },
    },
    h("label", { for: "token" }, "Service-account token"),
    input,
    h("button", { type: "submit" }, "Sign in"),
    error,
  );
  return [
    h("h1", {}, "Sign in"),
    h(
      "p",
      { class: "muted" },
      "Paste a token: npm start prints one on a fresh data dir, or run runplane service-account create. ",
      "The token is kept sealed in an HttpOnly cookie for this browser only; sign out ends the session.",
    ),
    form,
  ];
}

async function appNames() {
  const data = await call(api.GET("/v3/projects/{project_id}/apps", {
    params: { path: { project_id: session.project_id } },
  }));
  return data.apps.map((a) => a.app_id);
}

async function runsPage(params) {
  const apps = await appNames();
  const app = params.get("app") ?? "";
  const status = params.get("status") ?? "";
  const mode = params.get("mode") ?? "";
  const cursor = params.get("cursor") ?? "";
  const withParams = (changes) => {
    const next = new URLSearchParams(params);
    for (const [key, value] of Object.entries(changes)) {
      if (value) next.set(key, value);
      else next.delete(key);
    }
    const query = next.toString();
    return `/runs${query ? `?${query}` : ""}`;
  };
  const pages = await Promise.all(
    (app ? [app] : apps).map((name) =>
      call(api.GET("/v4/projects/{project_id}/apps/{app_id}/runs", {
        params: {
          path: { project_id: session.project_id, app_id: name },
          query: { limit: 50, ...(status ? { status } : {}), ...(app && cursor ? { cursor } : {}) },
        },
      }))
    ),
  );
  let runs = pages.flatMap((page) => page.runs).sort((a, b) => (a.run_id < b.run_id ? 1 : -1));
  if (mode) runs = runs.filter((r) => r.mode === mode);
  const counts = Object.fromEntries(STATUSES.map((s) => [s, 0]));
  for (const run of runs) counts[run.status]++;
  const lookup = h("input", { id: "lookup", name: "run_id", placeholder: "run_01…", size: 30 });
  const filters = h(
    "form",
    {
      class: "filters",
      onsubmit: (event) => {
        event.preventDefault();
        const form = new FormData(event.currentTarget);
        go(`/dashboard${withParams({ app: form.get("app"), mode: form.get("mode"), cursor: "" })}`);
      },
    },
    h(
      "label",
      {},
      "App",
      h(
        "select",
        { name: "app" },
        h("option", { value: "" }, "All apps"),
        apps.map((a) => h("option", { value: a, selected: a === app }, a)),
      ),
    ),
    h(
      "label",
      {},
      "Mode",
      h(
        "select",
        { name: "mode" },
        h("option", { value: "" }, "Any"),
        MODES.map((m) => h("option", { value: m, selected: m === mode }, m)),
      ),
    ),
    h("button", { type: "submit" }, "Filter"),
  );
  const find = h(
    "form",
    {
      class: "filters",
      onsubmit: async (event) => {
        event.preventDefault();
        const id = lookup.value.trim();
        for (const name of apps) {
          const { response } = await api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
            params: { path: { project_id: session.project_id, app_id: name, run_id: id } },
          });
          if (response.ok) return go(`/dashboard/runs/${encodeURIComponent(id)}?app=${encodeURIComponent(name)}`);
        }
        find.append(errorBox(new Error(`No run ${id} in this project`)));
      },
    },
    h("label", { for: "lookup" }, "Find a run by id", lookup),
    h("button", { type: "submit", class: "secondary" }, "Find"),
  );
  const counters = h(
    "div",
    { class: "counts", role: "group", "aria-label": "Filter by status" },
    link(withParams({ status: "", cursor: "" }), `All`, { "aria-current": status === "" ? "true" : "false" }),
    STATUSES.map((s) =>
      link(withParams({ status: s, cursor: "" }), `${s} ${status && status !== s ? "" : counts[s]}`.trim(), {
        "aria-current": status === s ? "true" : "false",
      })
    ),
  );
  const next = app ? pages[0]?.next_cursor : null;
  const table = runs.length
    ? h(
      "div",
      { class: "scroll" },
      h(
        "table",
        {},
        h(
          "caption",
          { class: "muted" },
          app ? `Runs of ${app}, newest first` : "Runs of every app, newest first (50 per app)",
        ),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Run", "App", "Function", "Status", "Mode", "Created", "Run time"].map((t) =>
              h("th", { scope: "col" }, t)
            ),
          ),
        ),
        h(
          "tbody",
          { id: "runs" },
          runs.map((run) =>
            h(
              "tr",
              { "data-run": run.run_id },
              h(
                "td",
                { class: "mono" },
                link(`/runs/${encodeURIComponent(run.run_id)}?app=${encodeURIComponent(run.app_id)}`, run.run_id),
              ),
              h("td", {}, run.app_id),
              h("td", {}, run.function_name),
              h("td", {}, badge(run.status)),
              h("td", {}, run.mode),
              h("td", {}, when(run.created_at)),
              h("td", {}, ms(run.run_time_ms)),
            )
          ),
        ),
      ),
    )
    : h(
      "p",
      { class: "muted" },
      apps.length
        ? "No runs match: call an app, or clear the filters."
        : "No apps yet: deploy one with runplane deploy.",
    );
  return [
    h("h1", {}, "Runs"),
    h("div", { class: "row" }, filters, find),
    counters,
    table,
    next ? h("p", {}, link(withParams({ cursor: next }), "Older runs →")) : null,
  ];
}

async function runPage(runId, params) {
  const app = params.get("app");
  if (!app) throw new Error("Open a run from the runs list (its app is needed)");
  const path = { project_id: session.project_id, app_id: app, run_id: runId };
  const run = await call(api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", { params: { path } }));
  const actions = h("div", { class: "row" });
  if (run.mode === "async" && run.input !== null && !["queued", "running"].includes(run.status)) {
    actions.append(h("button", {
      type: "button",
      onclick: async () => {
        try {
          const accepted = await call(api.POST("/v4/{project_id}/{app_name}/{function_name}", {
            params: {
              path: { project_id: session.project_id, app_name: app, function_name: run.function_name },
              query: { async: true, rerunOf: run.run_id },
            },
            body: run.input,
          }));
          go(`/dashboard/runs/${encodeURIComponent(accepted.run_id)}?app=${encodeURIComponent(app)}`);
        } catch (error) {
          actions.append(errorBox(error));
        }
      },
    }, "Run again"));
  }
  if (run.status === "queued" || run.status === "running") {
    actions.append(h("button", {
      type: "button",
      class: "danger",
      onclick: async () => {
        try {
          await call(api.DELETE("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", { params: { path } }));
          void render();
        } catch (error) {
          actions.append(errorBox(error));
        }
      },
    }, "Cancel run"));
  }
  const facts = h(
    "dl",
    { class: "facts" },
    h("dt", {}, "Status"),
    h("dd", { id: "status" }, badge(run.status)),
    h("dt", {}, "App"),
    h("dd", {}, link(`/apps/${encodeURIComponent(run.app_id)}`, run.app_id)),
    h("dt", {}, "Function"),
    h("dd", {}, run.function_name),
    h("dt", {}, "Mode"),
    h("dd", {}, run.mode),
    h("dt", {}, "Created"),
    h("dd", {}, when(run.created_at)),
    h("dt", {}, "Started"),
    h("dd", {}, when(run.started_at)),
    h("dt", {}, "Ended"),
    h("dd", {}, when(run.completed_at)),
    h("dt", {}, "Queue time"),
    h("dd", {}, ms(run.queue_time_ms)),
    h("dt", {}, "Run time"),
    h("dd", {}, ms(run.run_time_ms)),
  );
  const sections = [];
  if (run.rerun_of || run.reruns.length) {
    sections.push(h(
      "p",
      { id: "reruns" },
      run.rerun_of
        ? [
          "Runs again ",
          link(`/runs/${encodeURIComponent(run.rerun_of)}?app=${encodeURIComponent(app)}`, run.rerun_of),
          ". ",
        ]
        : null,
      run.reruns.length
        ? [
          "Run again as ",
          run.reruns.map((
            id,
            i,
          ) => [i ? ", " : "", link(`/runs/${encodeURIComponent(id)}?app=${encodeURIComponent(app)}`, id)]),
          ".",
        ]
        : null,
    ));
  }
  if (run.mode === "async") {
    sections.push(h("h2", {}, "Input"));
    sections.push(
      run.input === null ? h("p", { class: "muted" }, "The input has expired with the result.") : jsonBlock(run.input),
    );
  }
  if (run.status === "success") {
    sections.push(h("h2", {}, "Result"));
    sections.push(run.result_expired ? h("p", { class: "muted" }, "The result has expired.") : jsonBlock(run.result));
    if (run.result_truncated) {
      sections.push(h("p", { class: "muted" }, "The stored result was cut at the server's limit."));
    }
  }
  sections.push(h("h2", {}, "Logs"));
  sections.push(await logSection(path, run));
  if (run.error) {
    sections.push(h("h2", {}, "Error"));
    sections.push(h("p", { id: "error" }, `${run.error.type}: ${run.error.message}`));
    if (run.error.traceback) sections.push(h("pre", { class: "mono" }, run.error.traceback));
  }
  if (run.webhook) {
    sections.push(h("h2", {}, "Webhook"));
    const finished = !["queued", "running"].includes(run.status);
    sections.push(h(
      "p",
      { class: "row" },
      h("span", { class: "mono" }, run.webhook.endpoint),
      badge(run.webhook.status),
      finished && run.webhook.status !== "pending"
        ? h("button", {
          type: "button",
          class: "secondary",
          onclick: async (event) => {
            try {
              await call(api.POST("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/webhook/redeliver", {
                params: { path },
              }));
              event.currentTarget.replaceWith(h("span", { class: "muted", role: "status" }, "Redelivery queued"));
              setTimeout(() => void render({ keepLive: true }), 1000);
            } catch (error) {
              event.currentTarget.after(errorBox(error));
            }
          },
        }, "Redeliver webhook")
        : null,
    ));
    sections.push(
      run.webhook.attempts.length
        ? h(
          "table",
          {},
          h("thead", {}, h("tr", {}, ["#", "Time", "Outcome", "Duration"].map((t) => h("th", { scope: "col" }, t)))),
          h(
            "tbody",
            { id: "attempts" },
            run.webhook.attempts.map((a) =>
              h(
                "tr",
                {},
                h("td", {}, a.attempt),
                h("td", {}, when(a.at)),
                h("td", {}, a.status_code ?? a.error ?? "–"),
                h("td", {}, ms(a.duration_ms)),
              )
            ),
          ),
        )
        : h("p", { class: "muted" }, "No delivery attempt yet."),
    );
  }
  return [
    h("p", {}, link(`/runs?app=${encodeURIComponent(app)}`, "← Runs")),
    h(
      "h1",
      {},
      "Run ",
      h("span", { class: "mono", id: "run-id" }, run.run_id),
      " ",
      copyButton(run.run_id, "Copy run id"),
    ),
    facts,
    actions,
    ...sections,
  ];
}

/** A run's captured output; followed line by line while the run has not ended. */
async function logSection(path, run) {
  const log = await call(api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/logs", { params: { path } }));
  const pre = h("pre", { class: "mono", id: "logs", "aria-live": "polite" });
  const show = (line) =>
    pre.append(`${new Date(line.at).toLocaleTimeString()} ${line.stream === "stderr" ? "!" : " "} ${line.text}\n`);
  for (const line of log.lines) show(line);
  if (["queued", "running"].includes(run.status)) {
    const url = `/v4/projects/${encodeURIComponent(path.project_id)}/apps/${encodeURIComponent(path.app_id)}/runs/${
      encodeURIComponent(path.run_id)
    }/logs`;
    logStream = new EventSource(url);
    let replaced = false;
    logStream.addEventListener("message", (event) => {
      // The stream starts from the first line: it replaces what was read above.
      if (!replaced) pre.replaceChildren();
      replaced = true;
      show(JSON.parse(event.data));
    });
    logStream.addEventListener("end", () => logStream?.close());
  }
  const note = log.truncated
    ? h("p", { class: "muted" }, "The oldest lines were dropped (the run wrote more than the log limit).")
    : null;
  if (!log.lines.length && !["queued", "running"].includes(run.status)) {
    return h("p", { class: "muted" }, "The function wrote nothing (or its lines have expired).");
  }
  return h("div", {}, note, pre);
}

async function appsPage() {
  const data = await call(
    api.GET("/v3/projects/{project_id}/apps", { params: { path: { project_id: session.project_id } } }),
  );
  if (!data.apps.length) {
    return [
      h("h1", {}, "Apps"),
      h("p", { class: "muted" }, "No apps yet: runplane deploy ./my-app --project " + session.project_id),
    ];
  }
  return [
    h("h1", {}, "Apps"),
    h(
      "div",
      { class: "scroll" },
      h(
        "table",
        {},
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["App", "State", "Source", "Runtime", "Replicas (busy/idle/starting)", "Queued runs"].map((t) =>
              h("th", { scope: "col" }, t)
            ),
          ),
        ),
        h(
          "tbody",
          {},
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
    ),
  ];
}

async function appPage(appId) {
  const path = { project_id: session.project_id, app_id: appId };
  const app = await call(api.GET("/v3/projects/{project_id}/apps/{app_id}", { params: { path } }));
  const sections = [
    h("p", {}, link("/apps", "← Apps")),
    h("h1", {}, appId, " ", badge(app.state)),
    h(
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
            `${app.scaling.min_replicas}–${app.scaling.max_replicas} replicas, ${app.scaling.replica_concurrency} calls each, cooldown ${app.scaling.cooldown} s`,
          ),
        ]
        : null,
      app.error ? [h("dt", {}, "Error"), h("dd", {}, app.error)] : null,
    ),
  ];
  if (app.source === "deployment") {
    const page = await call(
      api.GET("/v3/projects/{project_id}/apps/{app_id}/deployments", { params: { path, query: { limit: 20 } } }),
    );
    const logs = h("div");
    sections.push(h("h2", {}, "Deployments"));
    sections.push(h(
      "div",
      { class: "scroll" },
      h(
        "table",
        {},
        h(
          "thead",
          {},
          h("tr", {}, ["Deployment", "Status", "Created", "Dependencies", ""].map((t) => h("th", { scope: "col" }, t))),
        ),
        h(
          "tbody",
          { id: "deployments" },
          page.deployments.map((d) =>
            h(
              "tr",
              { "data-deployment": d.deployment_id },
              h("td", { class: "mono" }, d.deployment_id, d.active ? h("strong", {}, " (active)") : null),
              h("td", {}, badge(d.status), d.error ? h("div", { class: "muted" }, d.error) : null),
              h("td", {}, when(d.created_at)),
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
                        params: { path: { ...path, deployment_id: d.deployment_id }, header: { accept: "text/plain" } },
                        parseAs: "text",
                      }),
                    );
                    logs.replaceChildren(
                      h("h2", {}, `Build log of ${d.deployment_id}`),
                      h("pre", { class: "mono" }, text),
                    );
                  },
                }, "Build log"),
                d.status === "ready" && !d.active
                  ? h("button", {
                    type: "button",
                    onclick: async () => {
                      try {
                        await call(
                          api.POST("/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}/activate", {
                            params: { path: { ...path, deployment_id: d.deployment_id } },
                          }),
                        );
                        void render();
                      } catch (error) {
                        logs.replaceChildren(errorBox(error));
                      }
                    },
                  }, "Activate")
                  : null,
              ),
            )
          ),
        ),
      ),
    ));
    sections.push(logs);
  }
  const recent = await call(
    api.GET("/v4/projects/{project_id}/apps/{app_id}/runs", { params: { path, query: { limit: 10 } } }),
  );
  sections.push(h("h2", {}, "Recent runs"));
  sections.push(
    recent.runs.length
      ? h(
        "table",
        { id: "recent-runs" },
        h("thead", {}, h("tr", {}, ["Run", "Function", "Status", "Created"].map((t) => h("th", { scope: "col" }, t)))),
        h(
          "tbody",
          {},
          recent.runs.map((run) =>
            h(
              "tr",
              {},
              h(
                "td",
                { class: "mono" },
                link(`/runs/${encodeURIComponent(run.run_id)}?app=${encodeURIComponent(appId)}`, run.run_id),
              ),
              h("td", {}, run.function_name),
              h("td", {}, badge(run.status)),
              h("td", {}, when(run.created_at)),
            )
          ),
        ),
      )
      : h("p", { class: "muted" }, "No runs yet: call a function below."),
  );
  sections.push(h("p", {}, link(`/runs?app=${encodeURIComponent(appId)}`, "All runs of this app →")));
  sections.push(callForm(appId));
  return sections;
}

function callForm(appId) {
  const out = h("div", { id: "call-output" });
  const fn = h("input", { id: "fn", name: "function", value: "run", required: true });
  const body = h("textarea", { id: "body", name: "body", spellcheck: "false" }, "{}");
  const stream = h("input", { type: "checkbox", id: "stream", name: "stream" });
  return h(
    "form",
    {
      class: "stack",
      onsubmit: async (event) => {
        event.preventDefault();
        let input;
        try {
          input = JSON.parse(body.value || "{}");
        } catch {
          out.replaceChildren(errorBox(new Error("The body is not JSON")));
          return;
        }
        const path = { project_id: session.project_id, app_name: appId, function_name: fn.value };
        if (!stream.checked) {
          const { data, error, response } = await api.POST("/v4/{project_id}/{app_name}/{function_name}", {
            params: { path },
            body: input,
          });
          out.replaceChildren(response.ok ? jsonBlock(data) : errorBox(new Error(problemText(error, response))));
          return;
        }
        const list = h("ol", { class: "mono" });
        out.replaceChildren(h("p", { class: "muted" }, "Streaming…"), list);
        const { response } = await api.POST("/v4/{project_id}/{app_name}/{function_name}", {
          params: { path },
          body: input,
          headers: { Accept: "text/event-stream" },
          parseAs: "stream",
        });
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) !== -1) {
            const data = buffer.slice(0, end).split("\n").filter((l) => l.startsWith("data:")).map((l) =>
              l.slice(5).trimStart()
            ).join("\n");
            buffer = buffer.slice(end + 2);
            if (data) list.append(h("li", {}, data));
          }
        }
        out.firstChild.textContent = "Stream ended.";
      },
    },
    h("h2", {}, "Call a function"),
    h("label", { for: "fn" }, "Function"),
    fn,
    h("label", { for: "body" }, "JSON body"),
    body,
    h("label", { class: "inline" }, stream, "Stream the items as they are yielded"),
    h("button", { type: "submit" }, "Call"),
    out,
  );
}

const SCOPE_HELP = { run: "call apps", rest: "read the REST API", deploy: "deploy apps", admin: "manage API keys" };

async function keysPage() {
  const path = { project_id: session.project_id };
  const data = await call(api.GET("/v3/projects/{project_id}/service-accounts", { params: { path } }));
  const created = h("div", { id: "created" });
  const form = h(
    "form",
    {
      class: "stack",
      onsubmit: async (event) => {
        event.preventDefault();
        const values = new FormData(event.currentTarget);
        const scopes = values.getAll("scope");
        const days = Number(values.get("days"));
        try {
          const account = await call(api.POST("/v3/projects/{project_id}/service-accounts", {
            params: { path },
            body: {
              name: String(values.get("name")),
              scopes,
              ...(days ? { expires_at: new Date(Date.now() + days * 86_400_000).toISOString() } : {}),
            },
          }));
          await render();
          document.getElementById("created").replaceChildren(
            h(
              "div",
              { class: "notice", role: "status" },
              h(
                "p",
                {},
                h("strong", {}, `Token for ${account.name}`),
                ": copy it now. It is shown once and cannot be shown again.",
              ),
              h("pre", { class: "mono", id: "new-token" }, account.token),
              copyButton(account.token, "Copy the new token"),
            ),
          );
        } catch (error) {
          created.replaceChildren(errorBox(error));
        }
      },
    },
    h("h2", {}, "Create an API key"),
    h("label", { for: "key-name" }, "Name"),
    h("input", { id: "key-name", name: "name", required: true, maxlength: 100 }),
    h("label", { for: "key-days" }, "Expires in"),
    h(
      "select",
      { id: "key-days", name: "days" },
      h("option", { value: "7" }, "7 days"),
      h("option", { value: "30" }, "30 days"),
      h("option", { value: "0", selected: true }, "90 days (or when your own token expires)"),
    ),
    h(
      "fieldset",
      {},
      h("legend", {}, "Scopes (never more than your own token has)"),
      ["run", "rest", "deploy", "admin"].map((s) =>
        h(
          "label",
          { class: "inline" },
          h("input", {
            type: "checkbox",
            name: "scope",
            value: s,
            checked: s === "run",
            disabled: !session.scopes.includes(s),
          }),
          `${s} — ${SCOPE_HELP[s]}`,
        )
      ),
    ),
    h("button", { type: "submit" }, "Create key"),
  );
  const rows = data.service_accounts.map((a) =>
    h(
      "tr",
      { "data-account": a.service_account_id },
      h("td", {}, a.name, h("div", { class: "mono muted" }, a.service_account_id)),
      h("td", {}, a.scopes.join(", ")),
      h("td", {}, when(a.created_at)),
      h("td", {}, when(a.expires_at)),
      h("td", {}, a.last_used_at ? when(a.last_used_at) : "never"),
      h(
        "td",
        {},
        a.revoked_at
          ? h("span", { class: "muted" }, "revoked")
          : h("button", {
            type: "button",
            class: "danger",
            "aria-label": `Revoke ${a.name}`,
            onclick: async () => {
              if (!confirm(`Revoke ${a.name}? Calls with its token fail from now on.`)) return;
              await call(api.DELETE("/v3/projects/{project_id}/service-accounts/{service_account_id}", {
                params: { path: { ...path, service_account_id: a.service_account_id } },
              }));
              void render();
            },
          }, "Revoke"),
      ),
    )
  );
  return [
    h("h1", {}, "API keys"),
    created,
    h(
      "div",
      { class: "scroll" },
      h(
        "table",
        {},
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["Name", "Scopes", "Created", "Expires", "Last used", ""].map((t) => h("th", { scope: "col" }, t)),
          ),
        ),
        h("tbody", { id: "accounts" }, rows),
      ),
    ),
    form,
  ];
}

/**
 * The project's secrets: names and times (the API never gives a value), a form to set one (made, or its
 * value replaced) and a delete button per name. The value field is emptied once it is sent.
 */
async function secretsPage() {
  const heading = h("h1", {}, "Secrets");
  const about = h(
    "p",
    { class: "muted" },
    "Environment variables of this project's replicas (they are replaced when a secret changes; calls in ",
    "flight finish). Builds never see them. A value is sealed on the server and never shown again.",
  );
  if (!session.scopes.includes("deploy")) {
    return [heading, about, h("p", {}, "Sign in with a token that has the deploy scope to see and set secrets.")];
  }
  const path = { project_id: session.project_id };
  const data = await call(api.GET("/v3/projects/{project_id}/secrets", { params: { path } }));
  const outcome = h("div", { id: "secret-outcome" });
  const name = h("input", {
    id: "secret-name",
    name: "name",
    required: true,
    maxlength: 128,
    pattern: "[A-Za-z_][A-Za-z0-9_]*",
    title: "An environment variable's name: letters, digits and _, not starting with a digit",
    autocomplete: "off",
    spellcheck: "false",
  });
  const value = h("textarea", { id: "secret-value", name: "value", autocomplete: "off", spellcheck: "false" });
  const form = h(
    "form",
    {
      class: "stack",
      onsubmit: async (event) => {
        event.preventDefault();
        const secretName = name.value;
        try {
          const answer = await api.PUT("/v3/projects/{project_id}/secrets/{name}", {
            params: { path: { ...path, name: secretName } },
            body: { value: value.value },
          });
          // `call` throws for a refusal (and signs out on a 401); the status says made or replaced.
          await call(Promise.resolve(answer));
          value.value = "";
          await render();
          document.getElementById("secret-outcome").replaceChildren(
            h(
              "p",
              { class: "notice", role: "status" },
              `${answer.response.status === 201 ? "Created" : "Replaced"} ${secretName}.`,
            ),
          );
        } catch (error) {
          outcome.replaceChildren(errorBox(error));
        }
      },
    },
    h("h2", {}, "Set a secret"),
    h("label", { for: "secret-name" }, "Name"),
    name,
    h("label", { for: "secret-value" }, "Value"),
    value,
    h("button", { type: "submit" }, "Set secret"),
  );
  const rows = data.secrets.map((s) =>
    h(
      "tr",
      { "data-secret": s.name },
      h("td", { class: "mono" }, s.name),
      h("td", {}, when(s.created_at)),
      h("td", {}, when(s.updated_at)),
      h(
        "td",
        {},
        h("button", {
          type: "button",
          class: "danger",
          "aria-label": `Delete ${s.name}`,
          onclick: async () => {
            if (!confirm(`Delete ${s.name}? The project's replicas are replaced without it.`)) return;
            try {
              await call(api.DELETE("/v3/projects/{project_id}/secrets/{name}", {
                params: { path: { ...path, name: s.name } },
              }));
              void render();
            } catch (error) {
              outcome.replaceChildren(errorBox(error));
            }
          },
        }, "Delete"),
      ),
    )
  );
  return [
    heading,
    about,
    outcome,
    data.secrets.length
      ? h(
        "div",
        { class: "scroll" },
        h(
          "table",
          {},
          h("thead", {}, h("tr", {}, ["Name", "Created", "Last set", ""].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", { id: "secrets" }, rows),
        ),
      )
      : h("p", { class: "muted", id: "no-secrets" }, "No secrets yet."),
    form,
  ];
}

/**
 * Follows the project's run changes (server-sent events, authenticated by the session cookie): each change
 * that `matters`, and the feed's opening, re-reads the page a moment later (changes in a burst are read
 * once), unless someone is typing in it.
 */
function followRuns(matters) {
  live?.close();
  live = new EventSource(`/v4/projects/${encodeURIComponent(session.project_id)}/runs/events`);
  let timer;
  const refresh = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      const typing = main.contains(document.activeElement)
        && /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
      if (typing) return refresh();
      void render({ keepLive: true });
    }, 250);
  };
  live.addEventListener("message", (event) => {
    if (matters(JSON.parse(event.data))) refresh();
  });
  live.addEventListener("resync", refresh);
  // The page was read before this feed was open: a change in between (a quick run ending) would be
  // missed, so read it once more when the feed opens.
  live.addEventListener("open", refresh);
}

// ---- Shell ----

/** Says loudly when this server runs tenants' code unjailed (its /readyz tells; a server not ready says later). */
async function warnWhenUnjailed() {
  const response = await fetch("/readyz").catch(() => null);
  if (!response?.ok) return;
  const { sandbox } = await response.json();
  if (sandbox.jailed) return;
  const banner = document.getElementById("sandbox-warning");
  banner.textContent = `Tenants' code runs unjailed on this server: ${sandbox.warnings.join("; ")}`;
  banner.hidden = false;
}

async function loadSession() {
  const response = await fetch("/dashboard/session");
  session = response.ok ? await response.json() : null;
}

async function render(options = {}) {
  logStream?.close();
  logStream = null;
  if (!options.keepLive) {
    live?.close();
    live = null;
  }
  const url = new URL(location.href);
  const route = url.pathname.replace(/^\/dashboard\/?/, "").split("/").map(decodeURIComponent);
  if (session === null) await loadSession();
  const nav = document.getElementById("nav");
  if (!session) {
    nav.hidden = true;
    if (route[0] !== "signin") history.replaceState(null, "", "/dashboard/signin");
    return show(...signInPage());
  }
  nav.hidden = false;
  document.getElementById("who").textContent = `${session.project_id} · ${session.scopes.join(", ")}`;
  for (const a of nav.querySelectorAll("a[data-nav]")) {
    if (a.dataset.nav === (route[0] || "runs")) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  try {
    let nodes;
    if (route[0] === "apps" && route[1]) nodes = await appPage(route[1]);
    else if (route[0] === "apps") nodes = await appsPage();
    else if (route[0] === "keys") nodes = await keysPage();
    else if (route[0] === "secrets") nodes = await secretsPage();
    else if (route[0] === "runs" && route[1]) {
      nodes = await runPage(route[1], url.searchParams);
      if (!live) followRuns((change) => change.run_id === route[1]);
    } else {
      nodes = await runsPage(url.searchParams);
      const app = url.searchParams.get("app");
      if (!live) followRuns((change) => !app || change.app_id === app);
    }
    show(...nodes);
    document.title = `${main.querySelector("h1")?.textContent ?? "Runplane"} · Runplane`;
  } catch (error) {
    if (error.message !== "signed out") show(h("h1", {}, "Something went wrong"), errorBox(error));
  }
}

document.getElementById("signout").addEventListener("click", async () => {
  await fetch("/dashboard/session/end", { method: "POST" });
  session = null;
  go("/dashboard/signin", { replace: true });
});
for (const a of document.querySelectorAll("a[href^='/dashboard']")) a.addEventListener("click", navigate);
addEventListener("popstate", () => void render());
void render();
void warnWhenUnjailed();
