/**
 * A sync or stream run that its caller executes: its abort source, its streamed items, and its one
 * final report (record, webhook delivery, events). Every call makes one, so it is a class (one shape,
 * methods shared) and makes its `done` promise only when someone waits for it.
 */
import type { Insertable } from "kysely";
import { LightAbortController } from "../abort/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import type { RunStatus } from "../store/mod.ts";
import type { RunTable } from "../store/schema.ts";
import { classifyFailure } from "./failure_outcome.ts";
import { INTERRUPTED, type LocalRun, type LocalRuns, RunCancelled } from "./_local_runs.ts";
import type { RunOutcome } from "./_queries.ts";
import { endLiveRun, runEnd } from "./_run_end.ts";
import type { RunEvents } from "./_run_events.ts";
import { StoredItems, storedResult } from "./_stored_result.ts";
import type { WriteBehind } from "./_write_behind.ts";
import type { LiveRun, RunCall, RunLogFields, SucceedOptions, WebSocketCounters } from "./run_call.ts";

/** What a live run reports to. */
export interface LiveRunDeps {
  writer: WriteBehind;
  local: LocalRuns;
  events: RunEvents;
  /** The largest result stored (and sent in the webhook), in JSON bytes. */
  resultLimitBytes: number;
  /** The store's clock: the run's `completed_at`. */
  now(): number;
}

/** The webhook of a call: its checked endpoint (without user information) and sealed secret and credentials. */
export interface CheckedWebhook {
  endpoint: string;
  sealed: string | null;
  /** The endpoint's `user:password`, sealed, or null when it had none. */
  credentials: string | null;
}

/** A live run, registered in `deps.local` (so `cancelRun` reaches it) until it ends. */
export class LiveRunRecord implements LiveRun, LocalRun {
  readonly runId: string;
  readonly #deps: LiveRunDeps;
  readonly #row: Insertable<RunTable>;
  readonly #webhook: CheckedWebhook | null;
  // Not an AbortController: see ../abort/mod.ts.
  readonly #controller = new LightAbortController();
  #items: StoredItems | undefined = undefined;
  #stream: boolean;
  #ended = false;
  #status: RunStatus = "running";
  #runTimeMs: number | null = null;
  #errorType: string | null = null;
  /** When it started, on the monotonic clock: its run time is measured there, whatever the wall clock does. */
  readonly #startedAt = performance.now();
  #done: Promise<void> | undefined = undefined;
  #resolveDone: (() => void) | undefined = undefined;
  #webSocket: (() => WebSocketCounters) | undefined = undefined;

  constructor(deps: LiveRunDeps, call: RunCall, row: Insertable<RunTable>, webhook: CheckedWebhook | null) {
    this.runId = row.run_id;
    this.#deps = deps;
    this.#row = row;
    this.#webhook = webhook;
    this.#stream = call.mode === "stream";
    deps.events.started({
      runId: row.run_id,
      projectId: row.project_id,
      appId: row.app_id,
      functionName: row.function_name,
      mode: row.mode,
      queueTimeMs: 0,
    });
    deps.local.set(row.run_id, this);
  }

  get signal(): LightAbortController {
    return this.#controller;
  }

  get ended(): boolean {
    return this.#ended;
  }

  logFields(): RunLogFields {
    const row = this.#row;
    return {
      run_id: row.run_id,
      app: `${row.project_id}/${row.app_id}`,
      function: row.function_name,
      mode: this.#stream ? "stream" : row.mode,
      run_status: this.#status,
      run_time_ms: this.#runTimeMs,
      queue_time_ms: 0,
      error_type: this.#errorType,
    };
  }

  /** Settles once the run's final state is buffered (made on first use). */
  get done(): Promise<void> {
    if (this.#ended) return Promise.resolve();
    this.#done ??= new Promise<void>((resolve) => (this.#resolveDone = resolve));
    return this.#done;
  }

  abort(reason: unknown): void {
    this.#controller.abort(reason);
  }

  cancel(): void {
    this.#controller.abort(new RunCancelled());
    // Nobody answers on this path; a record that could not be stored was logged by the writer.
    this.#end({ status: "cancelled" }).catch(() => {});
  }

  cancelled(): Promise<void> {
    return this.#end({ status: "cancelled" });
  }

  /**
   * Ends the run `failure`/`interrupted` now, as its process stops before it finished (the drain
   * timeout): recorded, its webhook queued and its end told like any other end; what the function
   * reports later is ignored. Its signal is left alone: stopping the replica cuts the call.
   */
  interrupt(): Promise<void> {
    return this.#end({ status: "failure", error: INTERRUPTED });
  }

  streaming(): void {
    if (this.#stream && this.#row.mode === "stream") return;
    this.#stream = true;
    // The stored running row says so too: a stream cut before its end (its process gone, its run ended
    // by a lease rescue from the stored row) is recorded as a stream. Buffered, written with the batch.
    this.#row.mode = "stream";
    if (!this.#ended) this.#deps.writer.put(this.#row);
  }

  /** Its record says so from now on: the row the write-behind holds, and its final state. */
  servedBy(deploymentId: string): void {
    this.#row.deployment_id = deploymentId;
  }

  countWebSocket(read: () => WebSocketCounters): void {
    this.#webSocket = read;
  }

  item(value: unknown): void {
    (this.#items ??= new StoredItems(this.#deps.resultLimitBytes)).add(value);
  }

  succeed(...args: [result?: unknown, options?: SucceedOptions]): Promise<void> {
    const limit = this.#deps.resultLimitBytes;
    const result = args[1]?.truncated
      ? { json: null, truncated: true }
      : args.length
      ? storedResult(args[0], limit)
      : this.#stream
      ? (this.#items ?? new StoredItems(limit)).result()
      : storedResult(null, limit);
    return this.#end({ status: "success", result }, args[1]?.runTimeMs);
  }

  fail(error: unknown): Promise<void> {
    // Its signal is aborted only when the caller went away or the run was cancelled: whatever the
    // interrupted function then reports, the run was cancelled, as `cancelRun` records it. A passing
    // reason fails it too: its caller is answered with the problem, and may call again.
    return this.#end(classifyFailure(error, { signal: this.#controller }));
  }

  #end(outcome: RunOutcome, runTimeMs?: number): Promise<void> {
    if (this.#ended) return Promise.resolve();
    this.#ended = true;
    // A stored list was read by `succeed` already; any other end drops it.
    this.#items?.close();
    const row = this.#row;
    if (this.#webSocket) row.websocket_json = JSON.stringify(this.#webSocket());
    const { writer, local, events } = this.#deps;
    const end = runEnd(
      {
        run_id: row.run_id,
        project_id: row.project_id,
        app_id: row.app_id,
        function_name: row.function_name,
        mode: row.mode,
        started_at: Number(row.started_at),
        queue_time_ms: 0,
        // The webhook's, sealed, as the running record has them.
        webhook_endpoint: this.#webhook?.endpoint ?? null,
        webhook_secret: this.#webhook?.sealed ?? null,
        webhook_credentials: this.#webhook?.credentials ?? null,
      },
      outcome,
      {
        now: this.#deps.now(),
        runTimeMs: runTimeMs ?? Math.round(performance.now() - this.#startedAt),
        mode: this.#stream ? "stream" : row.mode,
        loggedByCaller: true,
      },
    );
    local.delete(row.run_id);
    this.#status = outcome.status;
    this.#runTimeMs = end.event.runTimeMs;
    this.#errorType = end.event.errorType ?? null;
    const committed = endLiveRun({ writer, events }, row, end);
    this.#resolveDone?.();
    // When the store refuses the final state of a run with a webhook, the caller is told so instead of
    // getting an answer nothing recorded.
    return committed.catch((error: unknown) => {
      // A run ended elsewhere first: its caller is told so (`endLiveRun`), not that the store is away.
      if (error instanceof ProblemError) throw error;
      throw new ProblemError(
        "store-unavailable",
        `Run ${row.run_id} ended ${outcome.status}, but its record and webhook could not be stored; the server keeps retrying them. Check the run with getRun before calling again`,
        { runId: row.run_id, cause: error, headers: { "Retry-After": "2" } },
      );
    });
  }
}
