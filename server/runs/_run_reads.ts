/**
 * The run service's reads: one run (with its webhook and reruns), pages of runs, a run's log (whole or
 * followed) and the queued runs per app. Each first writes the buffered records, so a run written
 * behind is found.
 */
import type { Kysely } from "kysely";
import { ProblemError } from "../problems/mod.ts";
import { type Database, isTerminal } from "../store/mod.ts";
import { webhookViews } from "../webhooks/mod.ts";
import { decodeCursor, encodeCursor } from "./_cursor.ts";
import { queuedRunsByApp, selectReruns, selectRun, selectRunPage } from "./_queries.ts";
import type { ListProjectRunsOptions, RunPage, RunRef, RunSettings } from "./_service_types.ts";
import { type Run, type RunRow, toRun, toRunSummary } from "./_view.ts";
import type { WriteBehind } from "./_write_behind.ts";
import { readRunLog, type RunLog, type RunLogLine, type RunLogWriter } from "./run_logs.ts";

/** What `RunReads` reads from. */
export interface RunReadsOptions {
  db: Kysely<Database>;
  /** Flushed before a read, so that records written behind are found. */
  writer: WriteBehind;
  /** The settings runs follow (`resultTtlMs`: how long a finished run keeps its result). */
  config: RunSettings;
  /** The store's clock. */
  clock: () => number;
  /** Flushed before a run's log is read. */
  logs?: RunLogWriter;
}

/** Reads runs and their logs. */
export class RunReads {
  readonly #deps: RunReadsOptions;

  constructor(deps: RunReadsOptions) {
    this.#deps = deps;
  }

  /** The run of `row` as the API shows it: with its webhook's delivery and its reruns. */
  async view(row: RunRow): Promise<Run> {
    const { db, config, clock } = this.#deps;
    const [webhooks, reruns] = await Promise.all([
      row.webhook_endpoint ? webhookViews(db, [row.run_id]) : new Map(),
      selectReruns(db, row.run_id),
    ]);
    return toRun(row, {
      webhook: webhooks.get(row.run_id) ?? null,
      resultTtlMs: config.resultTtlMs,
      now: clock(),
      reruns,
    });
  }

  /** The stored row of `ref`; a 404 problem when the app has no such run. */
  async findRun(ref: RunRef): Promise<RunRow> {
    const { db, writer } = this.#deps;
    await writer.flush();
    const row = await selectRun(db, ref);
    if (!row) {
      throw new ProblemError("not-found", `No run ${ref.runId} in app ${ref.appId}; check the run id and app name`);
    }
    return row;
  }

  /** One run; a 404 problem when the app has no such run. */
  async getRun(ref: RunRef): Promise<Run> {
    return await this.view(await this.findRun(ref));
  }

  /** One page of runs: the written-behind ones first stored, one more row read to know of a next page. */
  async listPage(where: ListProjectRunsOptions & { projectId: string }): Promise<RunPage> {
    const { db, writer, config, clock } = this.#deps;
    await writer.flush();
    const { cursor, limit = 50, ...filters } = where;
    const rows = await selectRunPage(db, {
      ...filters,
      before: cursor === undefined ? undefined : decodeCursor(cursor),
      limit: limit + 1,
    });
    const page = rows.slice(0, limit);
    const withWebhook = page.filter((r) => r.webhook_endpoint).map((r) => r.run_id);
    const webhooks = await webhookViews(db, withWebhook);
    const now = clock();
    return {
      runs: page.map((row) =>
        toRunSummary(row, { webhook: webhooks.get(row.run_id) ?? null, resultTtlMs: config.resultTtlMs, now })
      ),
      next_cursor: rows.length > limit ? encodeCursor(page[page.length - 1].run_id) : null,
    };
  }

  /** The run's captured output so far; 404 for an unknown run. */
  async getRunLog(ref: RunRef): Promise<RunLog> {
    const { db, logs } = this.#deps;
    await this.findRun(ref);
    await logs?.flush();
    const { lines, truncated } = await readRunLog(db, { runId: ref.runId });
    return { lines: lines.map(({ seq: _seq, ...line }) => line), truncated };
  }

  /** The run's output line by line as it is written, then `{ end }` once it has ended; stops when `signal` aborts. */
  async followRunLog(ref: RunRef, signal: AbortSignal): Promise<AsyncIterable<RunLogLine | { end: string }>> {
    const { db, logs } = this.#deps;
    await this.findRun(ref);
    const findRun = (run: RunRef) => this.findRun(run);
    return (async function*(): AsyncGenerator<RunLogLine | { end: string }> {
      let after = 0;
      while (!signal.aborted) {
        const { status } = await findRun(ref);
        await logs?.flush();
        const { lines } = await readRunLog(db, { runId: ref.runId, afterSeq: after, limit: 1000 });
        for (const { seq, ...line } of lines) {
          after = seq;
          yield line;
        }
        // The status was read before the lines, and the writer flushed: once ended, every line is in.
        if (isTerminal(status) && lines.length < 1000) {
          yield { end: status };
          return;
        }
        if (lines.length < 1000) await new Promise((resolve) => setTimeout(resolve, 250));
      }
    })();
  }

  /** Queued runs per app, from the store. */
  async queuedByApp(): Promise<Array<{ projectId: string; appId: string; count: number }>> {
    return await queuedRunsByApp(this.#deps.db);
  }
}
