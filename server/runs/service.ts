/**
 * The run service: submits runs (sync, stream, async) with their webhooks and idempotency keys, serves
 * run records, cancels runs, and — when given an executor — dispatches queued async runs.
 *
 * It composes one part per job: the write-behind of live run records (`_run_writer.ts`), the loops and
 * wake-ups (`_run_loops.ts`), submissions and execution (`_submissions.ts`), reads (`_run_reads.ts`),
 * controls of a run (`_run_controls.ts`), and the way out (`_run_shutdown.ts`).
 */
import { randomBytes } from "node:crypto";
import type { LocalRuns } from "./_local_runs.ts";
import { registerOwner } from "./_owners.ts";
import { followAppLog, getAppLog, getAppStats } from "./app_insights.ts";
import { RunControls } from "./_run_controls.ts";
import { createRunEvents } from "./_run_events.ts";
import { startRunLoops } from "./_run_loops.ts";
import { RunReads } from "./_run_reads.ts";
import { RunShutdown } from "./_run_shutdown.ts";
import { createRunWriter } from "./_run_writer.ts";
import type { RunService, RunServiceOptions } from "./_service_types.ts";
import { DEFAULT_RESULT_LIMIT_BYTES } from "./_stored_result.ts";
import { RunSubmissions } from "./_submissions.ts";

export type {
  ExecuteOptions,
  Execution,
  ListProjectRunsOptions,
  ListRunsOptions,
  RunPage,
  RunRef,
  RunService,
  RunServiceOptions,
  RunSettings,
  Submission,
} from "./_service_types.ts";

/** Creates the service and starts its dispatcher (when it has an executor) and upkeep. */
export function createRunService(options: RunServiceOptions): RunService {
  const { db, logger, config } = options;
  const owner = options.owner ?? `rp_${randomBytes(8).toString("hex")}`;
  const local: LocalRuns = new Map();
  const onDeliveries = options.onDeliveries ?? (() => {});
  const clock = options.now ?? Date.now;
  const events = createRunEvents(logger, {
    metrics: options.metrics,
    onChange: options.onChange,
    changesWanted: options.changesWanted,
  });
  // Kept after a clean stop too: the next start sees the process is gone and ends what it left running.
  if (options.ownersDir) registerOwner(options.ownersDir, owner);
  const writer = createRunWriter(options, { owner, clock, onDeliveries });
  const resultLimitBytes = config.resultLimitBytes ?? DEFAULT_RESULT_LIMIT_BYTES;
  const loops = startRunLoops(options, { owner, local, events, resultLimitBytes, clock, onDeliveries });
  const reads = new RunReads({ db, writer, config, clock, logs: options.logs });
  // A stop ends the app-log follows (their connections would hold a closing server open).
  const stopping = new AbortController();
  const insights = { db, clock, logs: options.logs, flushRuns: () => writer.flush(), stopping: stopping.signal };
  const submissions = new RunSubmissions(options, {
    owner,
    writer,
    local,
    events,
    reads,
    resultLimitBytes,
    clock,
    dispatcher: loops.dispatcher,
  });
  const controls = new RunControls(options, { local, events, reads, clock, onDeliveries });
  const shutdown = new RunShutdown(options, { owner, local, events, writer, loops, clock, onDeliveries });

  return {
    submit: (call) => submissions.submit(call),
    execute: (call, executeOptions) => submissions.execute(call, executeOptions),
    redeliverWebhook: (ref) => controls.redeliverWebhook(ref),
    getRunLog: (ref) => reads.getRunLog(ref),
    followRunLog: (ref, signal) => reads.followRunLog(ref, signal),
    getAppLog: (app, logOptions) => getAppLog(insights, app, logOptions),
    followAppLog: (app, logOptions) => followAppLog(insights, app, logOptions),
    getAppStats: (app, window) => getAppStats(insights, app, window),
    getRun: (ref) => reads.getRun(ref),
    async listRuns(app, listOptions = {}) {
      return await reads.listPage({ ...listOptions, projectId: app.projectId, appId: app.appId });
    },
    async listProjectRuns(projectId, listOptions = {}) {
      return await reads.listPage({ ...listOptions, projectId });
    },
    cancelRun: (ref) => controls.cancelRun(ref),
    queuedByApp: () => reads.queuedByApp(),
    flush: () => writer.flush(),
    stopDispatching: () => shutdown.stopDispatching(),
    settled: (timeoutMs) => shutdown.settled(timeoutMs),
    abandon: () => shutdown.abandon(),
    stop() {
      stopping.abort();
      return shutdown.stop();
    },
  };
}
