// @ts-check
/**
 * What the server says of its sandbox (`/readyz`'s `sandbox`, the public API's): the shell's warning and
 * the pages that show deployments read it once per page load, and say in words when tenants' code would
 * run unjailed and deployments are refused.
 */
import { h } from "./dom.js";
import { fetchWithRetry } from "./transport.js";

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
  read ??= fetchWithRetry("/readyz").then(async (response) => {
    if (!response.ok) return null;
    return /** @type {import("./types.js").Schemas["Readiness"]} */ (await response.json()).sandbox;
  }).catch(() => null);
  const report = await read;
  if (!report) read = undefined;
  return report;
}

/** A warning's own "…: tenants' code runs unjailed", which the banner's lead says once for all of them. */
const SAID_BY_THE_LEAD = /:\s*tenants' code runs unjailed\.?$/i;

/** The server's warning that deployments are refused (`…: <what to do>`), which the lead says too. */
const REFUSAL = /^Deployments are refused\b[^:]*:\s*/;

/**
 * The shell's warning when tenants' code runs unjailed, or null when it is jailed: each thing said once
 * (the server's warnings each end "tenants' code runs unjailed", and a refusal repeats that it refuses).
 *
 * @returns {Promise<string | null | undefined>} undefined while the server is not ready (ask again later)
 */
export async function unjailedWarning() {
  const sandbox = await sandboxReport();
  if (!sandbox) return undefined;
  if (sandbox.jailed) return null;
  const refusal = sandbox.warnings.find((warning) => REFUSAL.test(warning));
  const details = sandbox.warnings.filter((warning) => warning !== refusal)
    .map((warning) => warning.replace(SAID_BY_THE_LEAD, "")).filter(Boolean).join("; ");
  if (sandbox.deployments !== "refused") return `Tenants' code runs unjailed on this server: ${details}.`;
  const remedy = refusal
    ? ` Deployments in its store are neither built nor served: ${refusal.replace(REFUSAL, "")}.`
    : "";
  return `This server refuses deployments: tenants' code would run unjailed here (${details}).${remedy}`;
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
