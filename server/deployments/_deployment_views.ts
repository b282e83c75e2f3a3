/**
 * Reading deployments as the API shows them: one by id, an app's deployments a page at a time, and the
 * not-found problems of an app and of a deployment.
 */
import type { Kysely } from "kysely";
import { ProblemError } from "../problems/mod.ts";
import type { Database } from "../store/mod.ts";
import { type DeploymentRow, selectApps, selectDeployment, selectDeployments } from "./_records.ts";
import type { AppRef, DeploymentView } from "./_types.ts";

/** Which deployment of which app a call names. */
export type DeploymentRef = AppRef & { deploymentId: string };

const DEPLOYMENT_ID = /^dep_[0-9a-z]{26}$/;

/** `ms` as an ISO 8601 time, or null. */
export function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

/** Whether a build with `status` has ended (ready or failed). */
export function isTerminal(status: string): boolean {
  return status === "ready" || status === "failed";
}

/** `row` as the API shows it, `active` when it is `activeId`. */
export function deploymentView(row: DeploymentRow, activeId: string | null | undefined): DeploymentView {
  return {
    deployment_id: row.deployment_id,
    project_id: row.project_id,
    app_id: row.app_id,
    status: row.status as DeploymentView["status"],
    active: row.deployment_id === activeId,
    digest: row.bundle_digest,
    size_bytes: Number(row.size_bytes),
    source: row.source as DeploymentView["source"],
    repository: row.repository_json ? JSON.parse(row.repository_json) : null,
    message: row.message,
    commit: row.git_commit,
    dirty: Number(row.git_dirty) === 1,
    base_image_digest: row.base_image_digest,
    base_image_status: row.base_image_status as DeploymentView["base_image_status"],
    image: row.image_reference !== null && row.image_digest !== null
      ? { reference: row.image_reference, digest: row.image_digest }
      : null,
    created_at: iso(row.created_at)!,
    started_at: iso(row.started_at),
    finished_at: iso(row.finished_at),
    error: row.error,
  };
}

/** The 404 of an app the project does not have. */
export function appNotFound(ref: AppRef): ProblemError {
  return new ProblemError("not-found", `Project ${ref.projectId} has no app named ${ref.appId}; deploy it first`);
}

function deploymentNotFound(ref: DeploymentRef): ProblemError {
  return new ProblemError("not-found", `App ${ref.projectId}/${ref.appId} has no deployment ${ref.deploymentId}`);
}

/** The app's active deployment: null when it has none, undefined when the store has no such app. */
export async function activeIdOf(db: Kysely<Database>, ref: AppRef): Promise<string | null | undefined> {
  return (await selectApps(db, ref))[0]?.active_deployment_id;
}

/** The deployment's row; a 404 when the app has no such deployment. */
export async function deploymentRow(db: Kysely<Database>, ref: DeploymentRef): Promise<DeploymentRow> {
  const found = await selectDeployment(db, ref);
  if (!found) throw deploymentNotFound(ref);
  return found;
}

/** The deployment as the API shows it; a 404 when the app has no such deployment. */
export async function readDeployment(db: Kysely<Database>, ref: DeploymentRef): Promise<DeploymentView> {
  const [found, activeId] = await Promise.all([deploymentRow(db, ref), activeIdOf(db, ref)]);
  return deploymentView(found, activeId);
}

/** Options of `listDeployments`. */
export interface DeploymentPage {
  limit: number;
  /** A `next_cursor` of a previous page (400 for anything else). */
  cursor?: string;
}

/** The app's deployments, newest first, a page at a time; a 404 for an app the project does not have. */
export async function listDeployments(
  db: Kysely<Database>,
  options: { ref: AppRef; page: DeploymentPage },
): Promise<{ deployments: DeploymentView[]; next_cursor: string | null }> {
  const { ref, page } = options;
  if (page.cursor !== undefined && !DEPLOYMENT_ID.test(page.cursor)) {
    throw new ProblemError("validation", "query.cursor is not a cursor this API made; pass next_cursor as it was", {
      errors: [{ path: "query.cursor", message: "must be a next_cursor from a previous page" }],
    });
  }
  const [rows, activeId] = await Promise.all([
    selectDeployments(db, { ...ref, before: page.cursor, limit: page.limit + 1 }),
    activeIdOf(db, ref),
  ]);
  if (rows.length === 0 && activeId === undefined && !page.cursor) throw appNotFound(ref);
  const more = rows.length > page.limit;
  const shown = rows.slice(0, page.limit);
  return {
    deployments: shown.map((r) => deploymentView(r, activeId)),
    next_cursor: more ? shown[shown.length - 1].deployment_id : null,
  };
}
