/**
 * The run records' store queries: portable Kysely builders here, and the statements of the hot paths
 * (compiled once, written per engine where they differ) from `server/store/statements/`; every state
 * change a conditional UPDATE.
 */
import type { Kysely, Transaction, Updateable } from "kysely";
import {
  type Database,
  type OpenRunStatus,
  type RunMode,
  type RunStatus,
  TERMINAL_RUN_STATUSES,
  type TerminalRunStatus,
} from "../store/mod.ts";
import { endLeasedRuns } from "../store/statements/run_rows.ts";
import {
  claimQueued,
  firstQueuedAppOfLaterProject,
  nextQueuedAppOfProject,
  oldestQueuedRun,
  renewLeasesOf,
} from "../store/statements/runs.ts";
import type { RunTable } from "../store/schema.ts";
import { enqueueDelivery, type NewDelivery } from "../webhooks/mod.ts";
import type { RunErrorInfo } from "./failure_outcome.ts";
import type { StoredResult } from "./_stored_result.ts";
import type { RunRow, RunSummaryRow } from "./_view.ts";

type Db = Kysely<Database> | Transaction<Database>;

/** How a run ended; a success carries its result as stored (see `_stored_result.ts`). */
export type RunOutcome =
  | { status: "success"; result: StoredResult }
  | { status: "failure"; error: RunErrorInfo }
  | { status: "cancelled" };

/** Reads one run of an app, or undefined. */
export function selectRun(
  db: Db,
  where: { projectId: string; appId: string; runId: string },
): Promise<RunRow | undefined> {
  return db
    .selectFrom("runs")
    .selectAll()
    .where("run_id", "=", where.runId)
    .where("project_id", "=", where.projectId)
    .where("app_id", "=", where.appId)
    .executeTakeFirst() as Promise<RunRow | undefined>;
}

/** Reads a run by id alone, or undefined. */
export function selectRunById(db: Db, runId: string): Promise<RunRow | undefined> {
  return db.selectFrom("runs").selectAll().where("run_id", "=", runId).executeTakeFirst() as Promise<
    RunRow | undefined
  >;
}

/** The columns a listed run shows: never its result, input or secret. */
const SUMMARY_COLUMNS = [
  "run_id",
  "project_id",
  "app_id",
  "function_name",
  "method",
  "mode",
  "status",
  "created_at",
  "started_at",
  "completed_at",
  "queue_time_ms",
  "run_time_ms",
  "result_expired",
  "result_truncated",
  "error_type",
  "error_message",
  "error_traceback",
  "webhook_endpoint",
  "deployment_id",
  "websocket_json",
] as const satisfies ReadonlyArray<keyof RunSummaryRow>;

/** Which runs `selectRunPage` reads: a project's, narrowed by each filter given. */
export interface RunPageWhere {
  projectId: string;
  appId?: string;
  functionName?: string;
  status?: RunStatus;
  mode?: RunMode;
  /** Unix ms: created at or after. */
  createdAfter?: number;
  /** Unix ms: created before. */
  createdBefore?: number;
  /** A run id: the page starts after it (newest first). */
  before?: string;
  limit: number;
}

/**
 * One page of a project's runs (an app's, with `appId`), newest first, starting after `before`; results
 * are not read. Indexes `runs_by_app` and `runs_by_project` walk the order.
 */
export function selectRunPage(db: Db, options: RunPageWhere): Promise<RunSummaryRow[]> {
  let query = db.selectFrom("runs").select(SUMMARY_COLUMNS).where("project_id", "=", options.projectId);
  if (options.appId !== undefined) query = query.where("app_id", "=", options.appId);
  if (options.functionName !== undefined) query = query.where("function_name", "=", options.functionName);
  if (options.status) query = query.where("status", "=", options.status);
  if (options.mode) query = query.where("mode", "=", options.mode);
  if (options.createdAfter !== undefined) query = query.where("created_at", ">=", options.createdAfter);
  if (options.createdBefore !== undefined) query = query.where("created_at", "<", options.createdBefore);
  if (options.before) query = query.where("run_id", "<", options.before);
  return query.orderBy("run_id", "desc").limit(options.limit).execute() as Promise<RunSummaryRow[]>;
}

/** A run's end as stored: its final columns and its webhook delivery (made by `runEnd`, `_run_end.ts`). */
export interface EndToStore {
  runId: string;
  /** When it ended (its `completed_at`): its delivery is made and due then. */
  now: number;
  columns: Updateable<RunTable>;
  delivery: NewDelivery | null;
  /** The lease generation the run was claimed in (an async run's), compared when its end is written; null: unknown. */
  leaseGeneration: number | null;
}

/** Which stored run `finishRun` may end. */
export interface FinishWhere {
  /** The states the run may be ended from. */
  from: OpenRunStatus[];
  /** Only while this process holds its lease. */
  owner?: string;
  /** Only while its lease ran out before this time (a stale-lease rescue). */
  staleBefore?: number;
  /** Only while it is in this lease generation (the one it was read in). */
  generation?: number;
  /** The owner a stale-lease rescue takes the run from, recorded with the end (`swept_owner`). */
  sweptOwner?: string | null;
}

/**
 * Ends a run that is still in one of `from` (and, when given, owned by `owner`, in `generation`): writes
 * its end, a new lease generation, and, in the same transaction, its webhook delivery, so the final state
 * is stored before any webhook leaves. Compared and set in one statement: returns false, having written
 * nothing, when the run was no longer in that state (another process ended or claimed it first).
 */
export async function finishRun(db: Kysely<Database>, end: EndToStore, where: FinishWhere): Promise<boolean> {
  const columns = where.sweptOwner ? { ...end.columns, swept_owner: where.sweptOwner } : end.columns;
  return await db.transaction().execute(async (trx) => {
    let update = trx.updateTable("runs").set(columns)
      // An owner blocked past its lease compares the generation it holds: this end closes it.
      .set((eb) => ({ lease_generation: eb("lease_generation", "+", 1) }))
      .where("run_id", "=", end.runId).where("status", "in", where.from);
    if (where.owner) update = update.where("lease_owner", "=", where.owner);
    if (where.staleBefore !== undefined) update = update.where("lease_expires_at", "<", where.staleBefore);
    if (where.generation !== undefined) update = update.where("lease_generation", "=", where.generation);
    const result = await update.executeTakeFirst();
    if (Number(result.numUpdatedRows) !== 1) return false;
    if (end.delivery) await enqueueDelivery(trx, end.delivery, { now: end.now });
    return true;
  });
}

/**
 * Ends runs still `running` under `owner`'s lease in the generation each was claimed in, like
 * `finishRun` from `running` with that owner, but many in one transaction: one statement for their final
 * states, then the webhook deliveries of those it ended, then one commit. A run ended elsewhere first (a
 * lease rescue while this owner was cut off from the store, a cancel) keeps that end and its delivery:
 * this owner writes nothing for it. Answers the ids it ended.
 */
export async function finishLeasedRuns(
  db: Kysely<Database>,
  owner: string,
  ends: readonly EndToStore[],
): Promise<Set<string>> {
  const rows = ends.map((end) => ({
    run_id: end.runId,
    status: end.columns.status as TerminalRunStatus,
    completed_at: end.now,
    run_time_ms: (end.columns.run_time_ms ?? null) as number | null,
    result_json: (end.columns.result_json ?? null) as string | null,
    result_truncated: (end.columns.result_truncated ?? 0) as number,
    error_type: (end.columns.error_type ?? null) as string | null,
    error_message: (end.columns.error_message ?? null) as string | null,
    error_traceback: (end.columns.error_traceback ?? null) as string | null,
    deployment_id: (end.columns.deployment_id ?? null) as string | null,
    lease_generation: end.leaseGeneration,
  }));
  return await db.transaction().execute(async (trx) => {
    const ended = new Set(await endLeasedRuns(trx, owner, rows));
    for (const { runId, now, delivery } of ends) {
      // In the transaction of the end: a run this owner did not end gets no delivery from it.
      if (ended.has(runId) && delivery) await enqueueDelivery(trx, delivery, { now });
    }
    return ended;
  });
}

/**
 * Apps with queued runs, in the order their oldest queued run arrived. Walks the status index from app
 * to app (a loose index scan: a few indexed lookups per app), so the dispatcher's poll costs the same
 * with a million queued runs as with ten; a GROUP BY would read every queued run.
 */
export async function appsWithQueuedRuns(db: Db): Promise<Array<{ project_id: string; app_id: string }>> {
  const apps: Array<{ project_id: string; app_id: string; oldest: string }> = [];
  let app = (await firstQueuedAppOfLaterProject(db, [""])).rows[0];
  while (app) {
    const { project_id, app_id } = app;
    apps.push({ project_id, app_id, oldest: (await oldestQueuedRun(db, [project_id, app_id])).rows[0]?.oldest ?? "" });
    const next = (await nextQueuedAppOfProject(db, [project_id, app_id])).rows[0];
    app = next ? { project_id, app_id: next.app_id } : (await firstQueuedAppOfLaterProject(db, [project_id])).rows[0];
  }
  return apps.sort((a, b) => (a.oldest < b.oldest ? -1 : 1)).map(({ project_id, app_id }) => ({ project_id, app_id }));
}

/** How many runs each app has queued (every process's), of every project or of `options.projectId`'s. */
export async function queuedRunsByApp(
  db: Db,
  options: { projectId?: string } = {},
): Promise<Array<{ projectId: string; appId: string; count: number }>> {
  let query = db
    .selectFrom("runs")
    .select(["project_id", "app_id", (eb) => eb.fn.countAll<number | string>().as("count")])
    .where("status", "=", "queued");
  if (options.projectId !== undefined) query = query.where("project_id", "=", options.projectId);
  const rows = await query.groupBy(["project_id", "app_id"]).execute();
  return rows.map((r) => ({ projectId: r.project_id, appId: r.app_id, count: Number(r.count) }));
}

/**
 * Claims up to `limit` of an app's queued runs, oldest first, for `owner`, in one statement: when
 * several processes claim at once, each run goes to one of them. `now` (default the process's clock)
 * should be the store's clock, which decides leases. Resolves with the claimed runs, oldest first.
 */
export async function claimQueuedRuns(
  db: Kysely<Database>,
  options: { projectId: string; appId: string; owner: string; leaseMs: number; limit: number; now?: number },
): Promise<RunRow[]> {
  if (options.limit <= 0) return [];
  const now = options.now ?? Date.now();
  const { rows } = await claimQueued(db, [
    now,
    now,
    options.owner,
    now + options.leaseMs,
    options.projectId,
    options.appId,
    Math.floor(options.limit),
  ]);
  return rows.sort((a, b) => (a.run_id < b.run_id ? -1 : a.run_id > b.run_id ? 1 : 0));
}

/**
 * Extends the leases of `owner`'s running runs (one statement; a run ended meanwhile, by a cancel or
 * by another process's recovery, is no longer `running` and is left alone); returns the ids among them
 * whose cancel was asked for. `now` (default the process's clock) should be the store's clock.
 */
export async function renewLeases(
  db: Kysely<Database>,
  options: { owner: string; leaseMs: number; now?: number },
): Promise<string[]> {
  const now = options.now ?? Date.now();
  const { rows } = await renewLeasesOf(db, [now + options.leaseMs, options.owner]);
  return rows.filter((r) => Number(r.cancel_requested) === 1).map((r) => r.run_id);
}

/**
 * Running runs whose lease ran out: their process died (or stalled past the lease). Reading them takes
 * no lock: each is then ended by `finishRun` with `staleBefore`, a conditional update that re-checks
 * the lease, so of processes recovering at once one ends each run.
 */
export function selectStaleRuns(db: Db, now: number): Promise<RunRow[]> {
  return db
    .selectFrom("runs")
    .selectAll()
    .where("status", "=", "running")
    .where("lease_expires_at", "<", now)
    .limit(500)
    .execute() as Promise<RunRow[]>;
}

/** A run's end as stored, as a writer that found its run ended elsewhere logs it. */
export type StoredEnd = Pick<RunRow, "run_id" | "status" | "error_type" | "completed_at" | "swept_owner">;

/** The stored ends of `runIds` (those that exist), by run id. */
export async function selectStoredEnds(db: Db, runIds: readonly string[]): Promise<Map<string, StoredEnd>> {
  const ends = new Map<string, StoredEnd>();
  if (runIds.length === 0) return ends;
  const rows = await db.selectFrom("runs").select(["run_id", "status", "error_type", "completed_at", "swept_owner"])
    .where("run_id", "in", runIds).execute();
  for (const row of rows) ends.set(row.run_id, row);
  return ends;
}

/** Running runs held by `owner`. */
export function selectRunsOf(db: Db, owner: string): Promise<RunRow[]> {
  return db.selectFrom("runs").selectAll().where("status", "=", "running").where("lease_owner", "=", owner)
    .execute() as Promise<RunRow[]>;
}

/** Removes results older than the TTL, marking them expired; returns how many. */
export async function expireResults(db: Db, options: { resultTtlMs: number; now: number }): Promise<number> {
  // Every ended run is marked (a failed or cancelled one has no result, but its input goes too).
  const result = await db
    .updateTable("runs")
    .set({ result_json: null, input_json: null, result_expired: 1 })
    .where("result_expired", "=", 0)
    .where("status", "in", TERMINAL_RUN_STATUSES)
    .where("completed_at", "<=", options.now - options.resultTtlMs)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** The runs that ran `runId` again, oldest first. */
export async function selectReruns(db: Db, runId: string): Promise<string[]> {
  const rows = await db.selectFrom("runs").select("run_id").where("rerun_of", "=", runId).orderBy("run_id").limit(100)
    .execute();
  return rows.map((r) => r.run_id);
}
