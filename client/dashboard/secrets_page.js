// @ts-check
/**
 * The secrets page: the project's secret names and times (the API never gives a value), a form to set
 * one (made, or its value replaced) and a delete button per name. The value field is emptied once sent.
 */
import { api, call } from "./api.js";
import { errorBox, h, replace, table } from "./dom.js";
import { when } from "./format.js";
import { rerender } from "./navigation.js";
import { requireSession } from "./session.js";

/**
 * The form that sets a secret; its outcome shows in `#secret-outcome`.
 *
 * @param {{ project_id: string }} path
 * @param {HTMLElement} outcome
 */
function setForm(path, outcome) {
  const name = h("input", {
    id: "secret-name",
    name: "name",
    required: true,
    maxlength: 128,
    pattern: "[A-Za-z_][A-Za-z0-9_]*",
    title: "An environment variable's name: letters, digits and _, not starting with a digit; not one the "
      + "platform sets or a program reads as it starts (RUNPLANE_*, PATH, LD_*, TZ, most PYTHON*, …), as for [env]",
    autocomplete: "off",
    spellcheck: "false",
  });
  const value = h("textarea", { id: "secret-value", name: "value", autocomplete: "off", spellcheck: "false" });
  return h(
    "form",
    {
      class: "stack",
      /** @param {SubmitEvent} event */
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
          await rerender();
          replace(
            /** @type {HTMLElement} */ (document.getElementById("secret-outcome")),
            h(
              "p",
              { class: "notice", role: "status" },
              `${answer.response.status === 201 ? "Created" : "Replaced"} ${secretName}.`,
            ),
          );
        } catch (error) {
          replace(outcome, errorBox(error));
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
}

/** The page's nodes. */
export async function secretsPage() {
  const session = requireSession();
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
              void rerender();
            } catch (error) {
              replace(outcome, errorBox(error));
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
      ? h("div", { class: "scroll" }, table(["Name", "Created", "Last set", ""], rows, { bodyId: "secrets" }))
      : h("p", { class: "muted", id: "no-secrets" }, "No secrets yet."),
    setForm(path, outcome),
  ];
}
