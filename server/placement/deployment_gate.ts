/**
 * Whether this process takes tenants' code. With `RUNPLANE_SANDBOX=auto` and no working jail, a tenant's
 * code would run unjailed, as the server's user (root, often), able to read the data dir's keys and
 * sealed secrets: so deployments are refused (503 `sandbox-unavailable`), those already in the store are
 * neither built nor served here, and the start banner, `/readyz` and the dashboard say so. The apps folder
 * (`RUNPLANE_APPS_DIR`) is still served: its code is the operator's own. `RUNPLANE_SANDBOX=off` is the
 * operator saying, knowingly, that unjailed deployments are accepted; `required` never starts without a
 * jail.
 */
import { ProblemError } from "../problems/mod.ts";
import type { SandboxStatus } from "../sandbox/mod.ts";

/** `/readyz`'s `sandbox` report: the status as the contract's `SandboxReport` shows it. */
export interface SandboxReport {
  setting: SandboxStatus["setting"];
  jailed: boolean;
  /** `refused` while tenants' code would run unjailed by accident (`auto` without a jail). */
  deployments: "accepted" | "refused";
  warnings: string[];
}

/** Whether deployments are refused: `RUNPLANE_SANDBOX=auto` and no working jail here. */
export function deploymentsRefused(status: Pick<SandboxStatus, "setting" | "jailed">): boolean {
  return status.setting === "auto" && !status.jailed;
}

/** What the operator may do, for every message that says deployments are refused. */
const REMEDY =
  "install what is missing and restart the server, or set RUNPLANE_SANDBOX=off to accept unjailed deployments knowingly";

/** Why deployments are refused, naming what is missing, and what the operator may do about it. */
export function refusalReason(status: Pick<SandboxStatus, "problems">): string {
  return `Deployments are refused: this server cannot jail tenants' code (${status.problems.join("; ")}); ${REMEDY}`;
}

/**
 * Throws the 503 `sandbox-unavailable` problem when deployments are refused (see `deploymentsRefused`);
 * call it before anything that would accept tenants' code.
 */
export function refuseUnjailedDeployments(status: SandboxStatus): void {
  if (deploymentsRefused(status)) throw new ProblemError("sandbox-unavailable", refusalReason(status));
}

/** The `sandbox` member of `/readyz`: the status, whether deployments are taken, and a refusal among the warnings. */
export function sandboxReport(status: SandboxStatus): SandboxReport {
  const refused = deploymentsRefused(status);
  return {
    setting: status.setting,
    jailed: status.jailed,
    deployments: refused ? "refused" : "accepted",
    warnings: refused
      ? [
        ...status.problems,
        `Deployments are refused, and those in the store are neither built nor served here: ${REMEDY}`,
      ]
      : status.problems,
  };
}
