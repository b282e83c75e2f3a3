// @ts-check
/** The parts of a run's page below its facts: its logs, its error and its webhook deliveries. */
import { api, call } from "./api.js";
import { badge, errorBox, h, table } from "./dom.js";
import { duration, errorText, when } from "./format.js";
import { followLog } from "./live.js";
import { rerender } from "./navigation.js";

/** @typedef {import("./types.js").Run} Run */
/** @typedef {{ project_id: string; app_id: string; run_id: string }} RunPath */

/**
 * Whether `run` has not ended.
 *
 * @param {Run} run
 */
export function unfinished(run) {
  return run.status === "queued" || run.status === "running";
}

/**
 * A run's captured output; followed line by line while the run has not ended.
 *
 * @param {RunPath} path
 * @param {Run} run
 */
export async function logSection(path, run) {
  // Without `Accept: text/event-stream` the answer is the JSON `RunLog`, not the stream.
  const log = /** @type {import("./types.js").Schemas["RunLog"]} */ (
    await call(api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/logs", { params: { path } }))
  );
  const pre = h("pre", { class: "mono", id: "logs", "aria-live": "polite" });
  /** @param {import("./types.js").RunLogLine} line */
  const show = (line) =>
    pre.append(`${new Date(line.at).toLocaleTimeString()} ${line.stream === "stderr" ? "!" : " "} ${line.text}\n`);
  for (const line of log.lines) show(line);
  if (unfinished(run)) {
    const url = `/v4/projects/${encodeURIComponent(path.project_id)}/apps/${encodeURIComponent(path.app_id)}/runs/${
      encodeURIComponent(path.run_id)
    }/logs`;
    followLog(url, (line, first) => {
      // The feed starts from the first line: it replaces what was read above.
      if (first) pre.replaceChildren();
      show(line);
    });
  }
  const note = log.truncated
    ? h("p", { class: "muted" }, "The oldest lines were dropped (the run wrote more than the log limit).")
    : null;
  if (!log.lines.length && !unfinished(run)) {
    return h("p", { class: "muted" }, "The function wrote nothing (or its lines have expired).");
  }
  return h("div", {}, note, pre);
}

/**
 * A WebSocket run's traffic each way and how its connection closed (every value shown as text).
 *
 * @param {NonNullable<Run["websocket"]>} websocket
 */
export function websocketSection(websocket) {
  const close = websocket.close_code === null ? "no code" : String(websocket.close_code);
  return [
    h("h2", {}, "WebSocket"),
    table(["", "Messages", "Bytes"], [
      h(
        "tr",
        {},
        h("th", { scope: "row" }, "Caller → app"),
        h("td", {}, String(websocket.messages_in)),
        h("td", {}, String(websocket.bytes_in)),
      ),
      h(
        "tr",
        {},
        h("th", { scope: "row" }, "App → caller"),
        h("td", {}, String(websocket.messages_out)),
        h("td", {}, String(websocket.bytes_out)),
      ),
    ], { id: "websocket-traffic" }),
    h(
      "p",
      { id: "websocket-close" },
      `Closed by the ${websocket.closed_by} with ${close}`,
      websocket.close_reason ? `: ${websocket.close_reason}` : "",
    ),
  ];
}

/**
 * A failed run's error, "Type: message", and its traceback (the app's own frames).
 *
 * @param {import("./types.js").RunError} error
 */
export function errorSection(error) {
  return [
    h("h2", {}, "Error"),
    h("p", { id: "error", class: "error-text" }, errorText(error)),
    error.traceback ? h("pre", { class: "mono", id: "traceback" }, error.traceback) : null,
  ];
}

/**
 * A run's webhook: the endpoint, its state, every delivery attempt, and a button that delivers a finished
 * run's webhook again.
 *
 * @param {RunPath} path
 * @param {Run} run
 * @param {NonNullable<Run["webhook"]>} webhook
 */
export function webhookSection(path, run, webhook) {
  const redeliver = !unfinished(run) && webhook.status !== "pending"
    ? h("button", {
      type: "button",
      class: "secondary",
      /** @param {MouseEvent} event */
      onclick: async (event) => {
        const button = /** @type {HTMLButtonElement} */ (event.currentTarget);
        try {
          await call(api.POST("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/webhook/redeliver", {
            params: { path },
          }));
          button.replaceWith(h("span", { class: "muted", role: "status" }, "Redelivery queued"));
          setTimeout(() => void rerender({ keepLive: true }), 1000);
        } catch (error) {
          button.after(errorBox(error));
        }
      },
    }, "Redeliver webhook")
    : null;
  return [
    h("h2", {}, "Webhook"),
    h("p", { class: "row" }, h("span", { class: "mono wrap" }, webhook.endpoint), badge(webhook.status), redeliver),
    webhook.attempts.length
      ? table(
        ["#", "Time", "Outcome", "Duration"],
        webhook.attempts.map((a) =>
          h(
            "tr",
            {},
            h("td", {}, a.attempt),
            h("td", {}, when(a.at)),
            h("td", {}, a.status_code ?? a.error ?? "–"),
            h("td", {}, duration(a.duration_ms)),
          )
        ),
        { bodyId: "attempts" },
      )
      : h("p", { class: "muted" }, "No delivery attempt yet."),
  ];
}
