// @ts-check
/**
 * "Call a function" on an app's page: a JSON body sent to the run API, and the answer shown: the result,
 * the stream's items as they arrive (read by `stream_reader.js`), or the problem.
 */
import { api, problemText } from "./api.js";
import { errorBox, h, jsonBlock, replace } from "./dom.js";
import { readCallStream } from "./stream_reader.js";
import { requireSession } from "./session.js";

/**
 * Calls `fn` of `appId` with `input` as a stream, showing each item in `out` as it arrives.
 *
 * @param {HTMLElement} out
 * @param {{ project_id: string; app_name: string; function_name: string }} path
 * @param {Record<string, never>} input
 */
async function streamInto(out, path, input) {
  const state = h("p", { class: "muted", role: "status" }, "Streaming…");
  const items = h("ol", { class: "mono items", id: "stream-items" });
  const problems = h("div", { id: "stream-problems" });
  replace(out, state, items, problems);
  let answer;
  try {
    answer = await api.POST("/v4/{project_id}/{app_name}/{function_name}", {
      params: { path },
      body: input,
      headers: { Accept: "text/event-stream" },
      parseAs: "stream",
    });
  } catch (error) {
    state.textContent = "The call failed.";
    problems.append(errorBox(new Error(`The server could not be reached: ${String(error)}`)));
    return;
  }
  const clean = await readCallStream(answer, {
    onItem: (data) => items.append(h("li", {}, h("pre", { class: "item" }, data))),
    onProblem: (text) => problems.append(errorBox(new Error(text))),
    onResult: (value) => items.replaceWith(jsonBlock(value)),
  });
  state.textContent = clean ? "Stream ended." : "The call failed.";
}

/**
 * The form that calls a function of `appId`.
 *
 * @param {string} appId
 */
export function callForm(appId) {
  const { project_id: projectId } = requireSession();
  const out = h("div", { id: "call-output" });
  const fn = h("input", { id: "fn", name: "function", value: "run", required: true });
  const body = h("textarea", { id: "body", name: "body", spellcheck: "false" }, "{}");
  const stream = h("input", { type: "checkbox", id: "stream", name: "stream" });
  return h(
    "form",
    {
      class: "stack",
      /** @param {SubmitEvent} event */
      onsubmit: async (event) => {
        event.preventDefault();
        /** @type {Record<string, never>} */
        let input;
        try {
          input = JSON.parse(body.value || "{}");
        } catch {
          replace(out, errorBox(new Error("The body is not JSON")));
          return;
        }
        const path = { project_id: projectId, app_name: appId, function_name: fn.value };
        if (stream.checked) return await streamInto(out, path, input);
        const { data, error, response } = await api.POST("/v4/{project_id}/{app_name}/{function_name}", {
          params: { path },
          body: input,
        });
        replace(out, response.ok ? jsonBlock(data) : errorBox(new Error(problemText(error, response))));
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
