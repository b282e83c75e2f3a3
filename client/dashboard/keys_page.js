// @ts-check
/**
 * The API keys page: the project's service accounts; create one (its token shown once, never again) and
 * revoke one (after a confirmation).
 */
import { api, call } from "./api.js";
import { copyButton, errorBox, h, replace, table } from "./dom.js";
import { when } from "./format.js";
import { rerender } from "./navigation.js";
import { requireSession } from "./session.js";

/** @typedef {import("./types.js").TokenScope} TokenScope */
/** @typedef {import("./types.js").ServiceAccount} ServiceAccount */

/** @type {Record<TokenScope, string>} */
const SCOPE_HELP = { run: "call apps", rest: "read the REST API", deploy: "deploy apps", admin: "manage API keys" };
/** @type {TokenScope[]} */
const SCOPES = ["run", "rest", "deploy", "admin"];

/**
 * The notice that shows a new token once, with a copy button.
 *
 * @param {{ name: string; token: string }} account
 */
function createdNotice(account) {
  return h(
    "div",
    { class: "notice", role: "status" },
    h(
      "p",
      {},
      h("strong", {}, `Token for ${account.name}`),
      ": copy it now. It is shown once and cannot be shown again.",
    ),
    h("pre", { class: "mono", id: "new-token" }, account.token),
    copyButton(account.token, { label: "Copy the new token" }),
  );
}

/**
 * The form that creates a key with the scopes the signed-in token has.
 *
 * @param {{ project_id: string }} path
 * @param {TokenScope[]} ownScopes
 */
function createForm(path, ownScopes) {
  const outcome = h("div");
  return h(
    "form",
    {
      class: "stack",
      /** @param {SubmitEvent} event */
      onsubmit: async (event) => {
        event.preventDefault();
        const values = new FormData(/** @type {HTMLFormElement} */ (event.currentTarget));
        const scopes = /** @type {TokenScope[]} */ (values.getAll("scope").map(String));
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
          await rerender();
          replace(/** @type {HTMLElement} */ (document.getElementById("created")), createdNotice(account));
        } catch (error) {
          replace(outcome, errorBox(error));
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
      SCOPES.map((s) =>
        h(
          "label",
          { class: "inline" },
          h("input", {
            type: "checkbox",
            name: "scope",
            value: s,
            checked: s === "run",
            disabled: !ownScopes.includes(s),
          }),
          `${s} — ${SCOPE_HELP[s]}`,
        )
      ),
    ),
    h("button", { type: "submit" }, "Create key"),
    outcome,
  );
}

/**
 * An account's row, with its revoke button.
 *
 * @param {{ project_id: string }} path
 * @param {ServiceAccount} a
 */
function accountRow(path, a) {
  return h(
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
            void rerender();
          },
        }, "Revoke"),
    ),
  );
}

/** The page's nodes. */
export async function keysPage() {
  const session = requireSession();
  const path = { project_id: session.project_id };
  const data = await call(api.GET("/v3/projects/{project_id}/service-accounts", { params: { path } }));
  return [
    h("h1", {}, "API keys"),
    h("div", { id: "created" }),
    h(
      "div",
      { class: "scroll" },
      table(
        ["Name", "Scopes", "Created", "Expires", "Last used", ""],
        data.service_accounts.map((a) => accountRow(path, a)),
        { bodyId: "accounts" },
      ),
    ),
    createForm(path, session.scopes),
  ];
}
