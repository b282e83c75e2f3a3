// @ts-check
/** The sign-in page: a token pasted once, kept by the server sealed in an HttpOnly cookie. */
import { errorBox, h, replace } from "./dom.js";
import { go } from "./navigation.js";
import { signIn } from "./session.js";

/** The page's nodes. */
export function signInPage() {
  const error = h("div");
  const input = h("textarea", { id: "token", name: "token", required: true, autocomplete: "off", spellcheck: "false" });
  const form = h(
    "form",
    {
      class: "stack",
      /** @param {SubmitEvent} event */
      onsubmit: async (event) => {
        event.preventDefault();
        error.replaceChildren();
        try {
          await signIn(input.value);
        } catch (refused) {
          replace(error, errorBox(refused));
          return;
        }
        input.value = "";
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
