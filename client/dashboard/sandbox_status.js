// @ts-check
/**
 * What the server says of its sandbox (`/readyz`'s `sandbox`, the public API's): the shell's warning and
 * the pages that show deployments read it once per page load, and say in words when tenants' code would
 * run unjailed and deployments are refused.
 */
import { h } from "./dom.js";

/** @typedef {import("./types.js").Schemas["SandboxReport"]} SandboxReport */

/** @type {Promise<SandboxReport | null> | undefined} */
let read;

/**
 * The sandbox report, or null while the server is not ready (read again next time: a server that is not
 * ready yet says later).
 *
 * @returns {Promise<SandboxReport | null>}
 */
export async function sandboxReport() {
  read ??= fetch("/readyz").then(async (response) => {
    if (!response.ok) return null;
    return /** @type {import("./types.js").Schemas["Readiness"]} */ (await response.json()).sandbox;
  }).catch(() => null);
  const report = await read;
  if (!report) read = undefined;
  return report;
}

/** The shell's warning when tenants' code runs unjailed, or null when it is jailed. */
export async function unjailedWarning() {
  const sandbox = await sandboxReport();
  if (!sandbox || sandbox.jailed) return null;
  const lead = sandbox.deployments === "refused"
    ? "This server refuses deployments: tenants' code would run unjailed here."
    : "Tenants' code runs unjailed on this server:";
  return `${lead} ${sandbox.warnings.join("; ")}`;
}

/** A note for the pages that show deployments when the server refuses them; null otherwise. */
export async function deploymentsRefusedNote() {
  const sandbox = await sandboxReport();
  if (sandbox?.deployments !== "refused") return null;
  return h(
    "p",
    { class: "warning", "data-note": "deployments-refused" },
    "Deployments are refused on this server: it cannot jail tenants' code, so `runplane deploy` answers 503 "
      + "(sandbox-unavailable) and deployed apps are not served here until its operator installs what is missing "
      + "or sets RUNPLANE_SANDBOX=off. Apps of its apps folder are served.",
  );
}
