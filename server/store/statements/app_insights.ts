/**
 * An app's log tail and activity (issue 51): a page of every run's lines interleaved, the runs a follow
 * watches, runs bucketed by when they ended with nearest-rank percentiles computed by window functions
 * (the same integer arithmetic on both engines, so both answer the same), and the hosts' per-minute
 * samples of replicas. Portable SQL: row values, `row_number()` and `count() over` exist in SQLite ≥ 3.25
 * and PostgreSQL alike.
 */
import { type Queryable, rawStatement } from "../mod.ts";
import { OPEN_RUN_STATUSES, sqlStatusList } from "../run_states.ts";

/** One stored line with its run. */
export interface AppLogRow {
  run_id: string;
  seq: number | string;
  at: number | string;
  stream: string;
  line: string;
}

const LOG_PAGE = rawStatement<AppLogRow>(
  `select l."run_id", l."seq", l."at", l."stream", l."line" from "run_logs" l
   join "runs" r on r."run_id" = l."run_id"
   where r."project_id" = ? and r."app_id" = ? and l."at" >= ?
     and (l."at", l."run_id", l."seq") > (?, ?, ?)
   order by l."at", l."run_id", l."seq" limit ?`,
);

/** Where a page of an app's lines starts: after this line (`at`, run id, seq) and not before `since`. */
export interface AppLogPosition {
  since: number;
  at: number;
  runId: string;
  seq: number;
}

/** At most `limit` lines of the app's runs after `position`, in (at, run id, seq) order. */
export async function selectAppLogPage(
  db: Queryable,
  query: { projectId: string; appId: string; position: AppLogPosition; limit: number },
): Promise<AppLogRow[]> {
  const { projectId, appId, position: p, limit } = query;
  const result = await LOG_PAGE(db, [projectId, appId, p.since, p.at, p.runId, p.seq, limit]);
  return result.rows;
}

const WATCHED_RUNS = rawStatement<{ run_id: string; status: string }>(
  `select "run_id", "status" from "runs"
   where "project_id" = ? and "app_id" = ?
     and ("status" in ${sqlStatusList(OPEN_RUN_STATUSES)} or "completed_at" >= ?)
   order by "created_at" desc limit ?`,
);

/** The app's runs that are open or ended at or after `endedSince` (newest first, at most `limit`): what a follow reads. */
export async function selectWatchedRuns(
  db: Queryable,
  query: { projectId: string; appId: string; endedSince: number; limit: number },
): Promise<Array<{ run_id: string; status: string }>> {
  const result = await WATCHED_RUNS(db, [query.projectId, query.appId, query.endedSince, query.limit]);
  return result.rows;
}

const RUN_LINES = rawStatement<AppLogRow>(
  `select "run_id", "seq", "at", "stream", "line" from "run_logs"
   where "run_id" = ? and "seq" > ? and "at" >= ? order by "seq" limit ?`,
);

/** A run's lines after `afterSeq`, written at or after `since`. */
export async function selectRunLinesAfter(
  db: Queryable,
  query: { runId: string; afterSeq: number; since: number; limit: number },
): Promise<AppLogRow[]> {
  const result = await RUN_LINES(db, [query.runId, query.afterSeq, query.since, query.limit]);
  return result.rows;
}

/** One bucket of runs as the store counts it. */
export interface RunBucketRow {
  bucket: number | string;
  status: string;
  runs: number | string;
  p50: number | string | null;
  p95: number | string | null;
}

// Nearest rank: the ceil(p × n)-th shortest, ceil done in integers ((n × p + 99) / 100) so that both
// engines pick the same row. Runs without a run time (cancelled before they started) count, but do not
// rank.
const RUN_BUCKETS = rawStatement<RunBucketRow>(
  `with ended as (
     select cast(("completed_at" - ?) / ? as integer) as "bucket", "status", "run_time_ms"
     from "runs"
     where "project_id" = ? and "app_id" = ? and "completed_at" >= ? and "completed_at" < ?
   ),
   ranked as (
     select "bucket", "run_time_ms",
       row_number() over (partition by "bucket" order by "run_time_ms") as "rank",
       count(*) over (partition by "bucket") as "n"
     from ended where "run_time_ms" is not null
   ),
   counted as (
     select "bucket", "status", count(*) as "runs" from ended group by "bucket", "status"
   ),
   ranks as (
     select "bucket",
       max(case when "rank" = ("n" * 50 + 99) / 100 then "run_time_ms" end) as "p50",
       max(case when "rank" = ("n" * 95 + 99) / 100 then "run_time_ms" end) as "p95"
     from ranked group by "bucket"
   )
   select c."bucket", c."status", c."runs", k."p50", k."p95"
   from counted c left join ranks k on k."bucket" = c."bucket"
   order by c."bucket", c."status"`,
);

/** The app's runs that ended in [`from`, `to`), per bucket of `bucketMs` and status, with each bucket's p50/p95 run time. */
export async function selectRunBuckets(
  db: Queryable,
  query: { projectId: string; appId: string; from: number; to: number; bucketMs: number },
): Promise<RunBucketRow[]> {
  const { projectId, appId, from, to, bucketMs } = query;
  const result = await RUN_BUCKETS(db, [from, bucketMs, projectId, appId, from, to]);
  return result.rows;
}

/** One bucket of the hosts' samples. */
export interface SampleBucketRow {
  bucket: number | string;
  replicas: number | string;
  starts: number | string;
}

const SAMPLE_BUCKETS = rawStatement<SampleBucketRow>(
  `with minutes as (
     select "minute", sum("replicas") as "replicas", sum("starts") as "starts"
     from "app_samples"
     where "project_id" = ? and "app_id" = ? and "minute" >= ? and "minute" < ?
     group by "minute"
   )
   select cast(("minute" - ?) / ? as integer) as "bucket", max("replicas") as "replicas", sum("starts") as "starts"
   from minutes group by 1 order by 1`,
);

/** Per bucket: the most replicas at once over every host (summed per minute), and the replicas started. */
export async function selectSampleBuckets(
  db: Queryable,
  query: { projectId: string; appId: string; from: number; to: number; bucketMs: number },
): Promise<SampleBucketRow[]> {
  const { projectId, appId, from, to, bucketMs } = query;
  const result = await SAMPLE_BUCKETS(db, [projectId, appId, from, to, from, bucketMs]);
  return result.rows;
}

const UPSERT_SAMPLE = rawStatement(
  `insert into "app_samples" ("project_id", "app_id", "host_id", "minute", "replicas", "starts")
   values (?, ?, ?, ?, ?, ?)
   on conflict ("project_id", "app_id", "minute", "host_id") do update set
     "replicas" = case when "app_samples"."replicas" > excluded."replicas"
       then "app_samples"."replicas" else excluded."replicas" end,
     "starts" = "app_samples"."starts" + excluded."starts"`,
);

/** One host's sample of one app in one minute. */
export interface AppSample {
  projectId: string;
  appId: string;
  hostId: string;
  minute: number;
  replicas: number;
  starts: number;
}

/** Folds `sample` into its minute's row: the most replicas seen, the starts added. */
export async function upsertAppSample(db: Queryable, sample: AppSample): Promise<void> {
  const { projectId, appId, hostId, minute, replicas, starts } = sample;
  await UPSERT_SAMPLE(db, [projectId, appId, hostId, minute, replicas, starts]);
}

const EXPIRE_SAMPLES = rawStatement(`delete from "app_samples" where "minute" < ?`);

/** Deletes the samples of minutes before `before`. */
export async function expireAppSamples(db: Queryable, before: number): Promise<number> {
  const result = await EXPIRE_SAMPLES(db, [before]);
  return Number(result.numAffectedRows ?? 0);
}
