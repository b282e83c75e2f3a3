/**
 * The run service's submissions: a call checked (the store's outage, its webhook, its `rerunOf`) and
 * turned into a run — an async run queued and committed (grouped with the others of its turn), a sync or
 * stream run started live and written behind, or, with an `Idempotency-Key`, the key reserved with the
 * run's first record (or answered from the run that used it) — and a live run executed and recorded.
 */
import type { Insertable, Transaction } from "kysely";
import { ProblemError } from "../problems/mod.ts";
import { createGroupCommit, type Database, type GroupCommit, isTerminal } from "../store/mod.ts";
import type { RunTable } from "../store/schema.ts";
import { insertRun, insertRuns } from "../store/statements/run_rows.ts";
import type { Ticker } from "../ticker/mod.ts";
import { checkWebhook } from "./_checked_webhook.ts";
import { executeRun } from "./_execute_run.ts";
import { firstRow } from "./_first_row.ts";
import { fingerprint, reserveKey } from "./_idempotency.ts";
import { type CheckedWebhook, type LiveRunDeps, LiveRunRecord } from "./_live_run.ts";
import type { LocalRuns } from "./_local_runs.ts";
import { selectRun, selectRunById } from "./_queries.ts";
import type { RunEvents } from "./_run_events.ts";
import type { RunReads } from "./_run_reads.ts";
import type { ExecuteOptions, Execution, RunServiceOptions, Submission } from "./_service_types.ts";
import type { WriteBehind } from "./_write_behind.ts";
import type { RunCall } from "./run_call.ts";

/** What `RunSubmissions` needs besides the service's options. */
export interface RunSubmissionsOptions {
  /** This process's lease owner id. */
  owner: string;
  writer: WriteBehind;
  /** The runs executing in this process. */
  local: LocalRuns;
  events: RunEvents;
  reads: RunReads;
  /** The largest result stored, in JSON bytes. */
  resultLimitBytes: number;
  /** The store's clock. */
  clock: () => number;
  /** The dispatcher, woken when an accepted run's app has room; none when this process does not dispatch. */
  dispatcher: Ticker | undefined;
}

/** Submits calls, and executes the live ones. */
export class RunSubmissions {
  readonly #options: RunServiceOptions;
  readonly #wiring: RunSubmissionsOptions;
  readonly #liveRunDeps: LiveRunDeps;
  readonly #queued: GroupCommit<Insertable<RunTable>>;

  constructor(options: RunServiceOptions, wiring: RunSubmissionsOptions) {
    const { db, logger, notifier } = options;
    const { owner, writer, local, events, resultLimitBytes, clock } = wiring;
    this.#options = options;
    this.#wiring = wiring;
    this.#liveRunDeps = { writer, local, events, resultLimitBytes, now: clock };
    // Accepted async runs: the 202 follows the commit of the run's record, and the records of calls
    // accepted in the same turn of the event loop share one commit.
    // One batch at a time: the next one collects while one commits, so under load one statement (one
    // round trip and one commit on PostgreSQL) carries many records. The wake-up follows the commit; the
    // 202s do not wait for it (a lost one only leaves the runs to the next poll).
    this.#queued = createGroupCommit<Insertable<RunTable>>(async (rows) => {
      await insertRuns(db, rows);
      notifier?.notify("runplane_runs", owner).catch((error) =>
        logger.warn({ err: error }, "queued runs not announced")
      );
    }, { maxInFlight: 1 });
  }

  /** Submits a call (see `RunService.submit`). */
  async submit(call: RunCall): Promise<Submission> {
    const options = this.#options;
    if (options.storeOutage?.refusesWrites) {
      throw new ProblemError(
        "store-unavailable",
        "The store (the server's database) cannot write now (its disk is full), so no run starts; retry after a few seconds",
        { headers: { "Retry-After": "2" } },
      );
    }
    const webhook = checkWebhook(call, options);
    if (call.rerunOf !== undefined) await this.#checkRerunOf(call);
    if (call.idempotencyKey !== undefined) return await this.#submitWithKey(call, webhook, call.idempotencyKey);
    if (call.mode === "async") return await this.#acceptAsync(call, webhook);
    return this.#startLive(call, webhook);
  }

  /** Submits a call and executes a live one (see `RunService.execute`). */
  async execute(call: RunCall, executeOptions: ExecuteOptions = {}): Promise<Execution> {
    const { executor } = this.#options;
    if (!executor) throw new Error("This run service has no executor; give createRunService one to execute calls");
    const submission = await this.submit(call);
    if (submission.kind !== "live") return submission;
    executeOptions.onLive?.(submission.run);
    return await executeRun(executor, {
      projectId: call.projectId,
      app: call.app,
      functionName: call.functionName,
      input: call.input,
      inputJson: call.inputJson,
      http: call.http,
    }, submission.run);
  }

  /** Announces committed queued runs to every process (inside `trx`: sent on its commit). */
  async #announceQueued(trx: Transaction<Database>): Promise<void> {
    await this.#options.notifier?.notify("runplane_runs", this.#wiring.owner, { db: trx });
  }

  /** A `rerunOf` must name a run of the same app (400 otherwise). */
  async #checkRerunOf(call: RunCall): Promise<void> {
    const { db } = this.#options;
    await this.#wiring.writer.flush();
    const found = await selectRun(db, { projectId: call.projectId, appId: call.app, runId: call.rerunOf! });
    if (!found) {
      throw new ProblemError("validation", `rerunOf names no run of ${call.projectId}/${call.app}: ${call.rerunOf}`, {
        errors: [{ path: "query.rerunOf", message: "must be a run of this app" }],
      });
    }
  }

  async #existingRun(call: RunCall, runId: string): Promise<Submission> {
    const { db } = this.#options;
    await this.#wiring.writer.flush();
    const row = await selectRunById(db, runId);
    if (row?.mode === "async") return { kind: "accepted", runId, replayed: true };
    if (!row || !isTerminal(row.status)) {
      throw new ProblemError(
        "conflict",
        "A call with this Idempotency-Key is still running; retry after it has finished",
        { runId },
      );
    }
    if (row.project_id !== call.projectId || row.app_id !== call.app) {
      throw new Error(`Idempotency key bound to run ${runId} of another app`);
    }
    return { kind: "replay", run: await this.#wiring.reads.view(row) };
  }

  /** The run's first record: `queued` for an async call, `running` (leased here) for a live one. */
  #firstRow(call: RunCall, webhook: CheckedWebhook | null): Insertable<RunTable> {
    const { owner, clock } = this.#wiring;
    return firstRow(call, { webhook, owner, clock, config: this.#options.config });
  }

  /** Tells a queued run's creation (a live run's start tells its creation). */
  #created(row: Insertable<RunTable>): void {
    this.#wiring.events.created({
      runId: row.run_id,
      projectId: row.project_id,
      appId: row.app_id,
      functionName: row.function_name,
      mode: row.mode,
      status: row.status,
      createdAt: row.created_at,
    });
  }

  /** An accepted async run, once its record is committed: wakes the dispatcher when the app has room. */
  async #accepted(call: RunCall, runId: string): Promise<Submission> {
    const { dispatcher } = this.#wiring;
    // Waking the dispatcher scans the queue; when the app has no free slot, the run waits for the
    // slot's release (which wakes the dispatcher) or the next poll anyway.
    if (dispatcher && (await this.#options.executor!.freeSlots({ projectId: call.projectId, app: call.app })) > 0) {
      dispatcher.wake();
    }
    return { kind: "accepted", runId, replayed: false };
  }

  /** Queues an async call: its record is committed (grouped with others of the same turn) before the 202. */
  async #acceptAsync(call: RunCall, webhook: CheckedWebhook | null): Promise<Submission> {
    const row = this.#firstRow(call, webhook);
    await this.#queued.add(row);
    this.#created(row);
    return await this.#accepted(call, row.run_id);
  }

  /** Starts a sync or stream run without a key: its record is buffered, not awaited. */
  #startLive(call: RunCall, webhook: CheckedWebhook | null): Submission {
    const row = this.#firstRow(call, webhook);
    // A call that ends within the batch window is written once, finished (an insert: see `create`).
    this.#wiring.writer.create(row);
    return { kind: "live", run: new LiveRunRecord(this.#liveRunDeps, call, row, webhook) };
  }

  /**
   * Submits a call with an `Idempotency-Key`: the key is reserved and the run's first record inserted in
   * one transaction; a key already used answers from its run (or refuses a different request).
   */
  async #submitWithKey(call: RunCall, webhook: CheckedWebhook | null, key: string): Promise<Submission> {
    const { db } = this.#options;
    const row = this.#firstRow(call, webhook);
    const print = fingerprint({
      app: call.app,
      function: call.functionName,
      mode: call.mode,
      input: call.input,
      webhook: webhook?.endpoint ?? null,
    });
    const reservation = await db.transaction().execute(async (trx) => {
      const found = await reserveKey(trx, {
        projectId: call.projectId,
        key,
        fingerprint: print,
        runId: row.run_id,
        now: row.created_at,
      });
      if (found.fresh) {
        await insertRun(trx, row);
        if (call.mode === "async") await this.#announceQueued(trx);
      }
      return found;
    });
    if (!reservation.fresh) {
      if (reservation.fingerprint !== print) {
        throw new ProblemError(
          "unprocessable",
          "This Idempotency-Key was used with a different request; use a new key for a new request",
          { runId: reservation.runId },
        );
      }
      return await this.#existingRun(call, reservation.runId);
    }
    if (call.mode === "async") {
      this.#created(row);
      return await this.#accepted(call, row.run_id);
    }
    return { kind: "live", run: new LiveRunRecord(this.#liveRunDeps, call, row, webhook) };
  }
}
