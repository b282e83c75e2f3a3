/**
 * An app's log tail and its activity over time (issue 51): every run's lines interleaved with their run
 * ids, a page at a time or followed; runs per bucket by outcome with p50/p95 run time, and the hosts'
 * samples of replicas and starts. A follow reads the store, never this process's memory, so it sees lines
 * any process of a cluster writes: each poll lists the app's open runs (and those ended lately) and reads
 * each one's lines after the last it gave, so a line is given once even when it reaches the store late.
 */
import type { Kysely } from "kysely";
import { ProblemError } from "../problems/mod.ts";
import type { Database } from "../store/mod.ts";
import {
  type AppLogRow,
  selectAppLogPage,
  selectRunBuckets,
  selectRunLinesAfter,
  selectSampleBuckets,
  selectWatchedRuns,
} from "../store/statements/app_insights.ts";
import type { RunLogWriter } from "./run_logs.ts";

/** One line of an app's output, as the API shows it. */
export interface AppLogLine {
  run_id: string;
  /** RFC 3339. */
  at: string;
  stream: "stdout" | "stderr";
  text: string;
}

/** A page of an app's output. */
export interface AppLogPage {
  lines: AppLogLine[];
  next_cursor: string;
  has_more: boolean;
}

/** What the app's reads need. */
export interface AppInsightsDeps {
  db: Kysely<Database>;
  /** The store's clock (Unix ms). */
  clock: () => number;
  /** Written before a read, so this process's pending lines are found. */
  logs?: RunLogWriter;
  /** Writes buffered run records, so a run written behind is found. */
  flushRuns: () => Promise<void>;
  /** Aborts when the service stops: every follow ends then. */
  stopping?: AbortSignal;
}

/** An app. */
export interface AppRef {
  projectId: string;
  appId: string;
}

/** Options of `getAppLog` and `followAppLog`. */
export interface AppLogOptions {
  /** Unix ms; default an hour before now. */
  since?: number;
  cursor?: string;
  limit?: number;
  /** How long a follow waits between reads of the store (default 250 ms). */
  pollMs?: number;
}

const HOUR_MS = 3_600_000;
/** A run ended this long ago is still read by a follow: its last lines may reach the store after its end. */
const ENDED_GRACE_MS = 30_000;
/** The most runs a follow reads at once (the newest). */
const WATCHED_LIMIT = 200;

function toLine(row: AppLogRow): AppLogLine {
  return {
    run_id: row.run_id,
    at: new Date(Number(row.at)).toISOString(),
    stream: row.stream as AppLogLine["stream"],
    text: row.line,
  };
}

function encodeCursor(position: { at: number; runId: string; seq: number }): string {
  return Buffer.from(JSON.stringify([position.at, position.runId, position.seq])).toString("base64url");
}

function decodeCursor(cursor: string): { at: number; runId: string; seq: number } {
  try {
    const [at, runId, seq] = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as unknown[];
    if (Number.isSafeInteger(at) && typeof runId === "string" && runId.length <= 64 && Number.isSafeInteger(seq)) {
      return { at: at as number, runId, seq: seq as number };
    }
  } catch {
    // Reported below.
  }
  throw new ProblemError("bad-request", "The cursor is not one this API gave; pass next_cursor as it came");
}

/** The rows of a page, one more read than `limit` to know of a next page. */
async function readPage(
  deps: AppInsightsDeps,
  app: AppRef,
  options: { since: number; cursor?: string; limit: number },
): Promise<{ rows: AppLogRow[]; next: string; more: boolean }> {
  const { since, limit } = options;
  await deps.logs?.flush();
  const after = options.cursor === undefined ? { at: since - 1, runId: "", seq: 0 } : decodeCursor(options.cursor);
  const rows = await selectAppLogPage(deps.db, { ...app, position: { since, ...after }, limit: limit + 1 });
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  const next = last ? { at: Number(last.at), runId: last.run_id, seq: Number(last.seq) } : after;
  return { rows: page, next: encodeCursor(next), more: rows.length > limit };
}

/** A page of the app's lines from `since` (or after `cursor`), oldest first. */
export async function getAppLog(deps: AppInsightsDeps, app: AppRef, options: AppLogOptions = {}): Promise<AppLogPage> {
  const since = options.since ?? deps.clock() - HOUR_MS;
  const { rows, next, more } = await readPage(deps, app, {
    since,
    cursor: options.cursor,
    limit: options.limit ?? 200,
  });
  return { lines: rows.map(toLine), next_cursor: next, has_more: more };
}

/** Reads the lines of the watched runs after those given; updates `given` (run id → last seq). */
async function readNewLines(
  deps: AppInsightsDeps,
  app: AppRef,
  options: { since: number; given: Map<string, number> },
): Promise<AppLogRow[]> {
  const { db, clock } = deps;
  const { since, given } = options;
  await deps.flushRuns();
  await deps.logs?.flush();
  const runs = await selectWatchedRuns(db, { ...app, endedSince: clock() - ENDED_GRACE_MS, limit: WATCHED_LIMIT });
  const watched = new Set(runs.map((r) => r.run_id));
  for (const runId of given.keys()) if (!watched.has(runId)) given.delete(runId);
  const rows: AppLogRow[] = [];
  for (const { run_id: runId } of runs) {
    const lines = await selectRunLinesAfter(db, { runId, afterSeq: given.get(runId) ?? 0, since, limit: 1000 });
    if (lines.length) given.set(runId, Number(lines[lines.length - 1].seq));
    rows.push(...lines);
  }
  return rows.sort((a, b) =>
    Number(a.at) - Number(b.at) || (a.run_id < b.run_id ? -1 : a.run_id > b.run_id ? 1 : 0)
    || Number(a.seq) - Number(b.seq)
  );
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/**
 * The app's lines from `since` on (a page at a time, as `getAppLog` reads them), then each line any
 * process writes as it reaches the store, until `signal` aborts.
 */
export function followAppLog(
  deps: AppInsightsDeps,
  app: AppRef,
  options: AppLogOptions & { signal: AbortSignal },
): AsyncIterable<AppLogLine> {
  const pollMs = options.pollMs ?? 250;
  return (async function*(): AsyncGenerator<AppLogLine> {
    // The caller's signal or the service's stop, whichever comes first (listeners let go at the end: a
    // service's signal outlives many follows).
    const ends = new AbortController();
    const end = () => ends.abort();
    const sources = [options.signal, deps.stopping].filter((s): s is AbortSignal => s !== undefined);
    for (const source of sources) {
      if (source.aborted) end();
      else source.addEventListener("abort", end, { once: true });
    }
    try {
      yield* followLines(deps, app, { ...options, signal: ends.signal, pollMs });
    } finally {
      for (const source of sources) source.removeEventListener("abort", end);
    }
  })();
}

/** The lines of `followAppLog`, until `options.signal` aborts. */
function followLines(
  deps: AppInsightsDeps,
  app: AppRef,
  options: AppLogOptions & { signal: AbortSignal; pollMs: number },
): AsyncIterable<AppLogLine> {
  const { signal, pollMs } = options;
  return (async function*(): AsyncGenerator<AppLogLine> {
    const since = options.since ?? deps.clock() - HOUR_MS;
    // A run's lines reach the store in the order of their seq (one process writes them, batch after
    // batch), so the last seq the history gave of a run is where its follow goes on: exact, no line twice.
    const given = new Map<string, number>();
    await deps.flushRuns();
    let cursor: string | undefined;
    for (;;) {
      const page = await readPage(deps, app, { since, cursor, limit: 1000 });
      for (const row of page.rows) {
        given.set(row.run_id, Math.max(given.get(row.run_id) ?? 0, Number(row.seq)));
        yield toLine(row);
      }
      cursor = page.next;
      if (!page.more || signal.aborted) break;
    }
    while (!signal.aborted) {
      const rows = await readNewLines(deps, app, { since, given });
      for (const row of rows) yield toLine(row);
      if (rows.length === 0) await pause(pollMs, signal);
    }
  })();
}

/** The spans `getAppStats` covers. */
export type AppStatsWindow = "1h" | "24h";

/** One bucket of an app's activity, as the API shows it. */
export interface AppStatsBucket {
  /** RFC 3339. */
  start: string;
  success: number;
  failure: number;
  cancelled: number;
  p50_ms: number | null;
  p95_ms: number | null;
  cold_starts: number;
  replicas: number | null;
}

/** An app's activity over a window. */
export interface AppStats {
  window: AppStatsWindow;
  bucket_seconds: number;
  buckets: AppStatsBucket[];
}

const WINDOWS: Record<AppStatsWindow, { bucketMs: number; buckets: number }> = {
  "1h": { bucketMs: 60_000, buckets: 60 },
  "24h": { bucketMs: 900_000, buckets: 96 },
};

/**
 * The app's runs that ended in each bucket of `window` (by outcome, with nearest-rank p50/p95 run time)
 * and its replicas and starts as the hosts sampled them; the last bucket is the current one.
 */
export async function getAppStats(deps: AppInsightsDeps, app: AppRef, window: AppStatsWindow): Promise<AppStats> {
  const { db, clock } = deps;
  const { bucketMs, buckets: count } = WINDOWS[window];
  await deps.flushRuns();
  const to = (Math.floor(clock() / bucketMs) + 1) * bucketMs;
  const from = to - count * bucketMs;
  const query = { ...app, from, to, bucketMs };
  const [runRows, sampleRows] = await Promise.all([selectRunBuckets(db, query), selectSampleBuckets(db, query)]);
  const buckets: AppStatsBucket[] = Array.from({ length: count }, (_, i) => ({
    start: new Date(from + i * bucketMs).toISOString(),
    success: 0,
    failure: 0,
    cancelled: 0,
    p50_ms: null,
    p95_ms: null,
    cold_starts: 0,
    replicas: null,
  }));
  for (const row of runRows) {
    const bucket = buckets[Number(row.bucket)];
    if (!bucket) continue;
    if (row.status === "success" || row.status === "failure" || row.status === "cancelled") {
      bucket[row.status] += Number(row.runs);
    }
    bucket.p50_ms = row.p50 === null ? null : Number(row.p50);
    bucket.p95_ms = row.p95 === null ? null : Number(row.p95);
  }
  for (const row of sampleRows) {
    const bucket = buckets[Number(row.bucket)];
    if (!bucket) continue;
    bucket.replicas = Number(row.replicas);
    bucket.cold_starts = Number(row.starts);
  }
  return { window, bucket_seconds: bucketMs / 1000, buckets };
}
