/**
 * A run's start and end, told once each: one log line and the run metrics (`runsStarted`,
 * `runsFinished`, `runDuration`, `runQueueTime`), labelled by app (`project/app`), mode and status.
 */
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics/mod.ts";

/** The instruments a run service records into. */
export type RunMetrics = Pick<Metrics, "runsStarted" | "runsFinished" | "runDuration" | "runQueueTime">;

/** A run that started. */
export interface StartedRun {
  runId: string;
  projectId: string;
  appId: string;
  mode: string;
  queueTimeMs: number;
}

/** A run that ended. */
export interface FinishedRun {
  runId: string;
  projectId: string;
  appId: string;
  mode: string;
  status: string;
  /** Null for a run that never started (cancelled while queued, interrupted before it ran). */
  runTimeMs: number | null;
  errorType?: string | null;
}

/** Tells starts and ends. */
export interface RunEvents {
  started(run: StartedRun): void;
  finished(run: FinishedRun): void;
}

/** Creates the teller; without `metrics` it only logs. */
export function createRunEvents(logger: Logger, metrics?: RunMetrics): RunEvents {
  return {
    started(run) {
      const app = `${run.projectId}/${run.appId}`;
      metrics?.runsStarted.inc({ app, mode: run.mode });
      metrics?.runQueueTime.observe({ app, mode: run.mode }, run.queueTimeMs / 1000);
      logger.info({ run_id: run.runId, app, mode: run.mode, queue_time_ms: run.queueTimeMs }, "run started");
    },
    finished(run) {
      const app = `${run.projectId}/${run.appId}`;
      const labels = { app, mode: run.mode, status: run.status };
      metrics?.runsFinished.inc(labels);
      if (run.runTimeMs !== null) metrics?.runDuration.observe(labels, run.runTimeMs / 1000);
      const line = {
        run_id: run.runId,
        app,
        mode: run.mode,
        status: run.status,
        duration_ms: run.runTimeMs,
        error_type: run.errorType ?? null,
      };
      if (run.errorType === "interrupted") logger.warn(line, "run finished: its process stopped while it ran");
      else logger.info(line, "run finished");
    },
  };
}
