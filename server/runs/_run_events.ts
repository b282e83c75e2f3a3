/**
 * A run's start and end, told once each: the run metrics (`runsStarted`, `runsFinished`, `runDuration`,
 * `runQueueTime`), labelled by app (`project/app`), mode and status, and log lines. `run started` is a
 * debug line; `run finished` is an info line, except for a run whose caller's request line reports its
 * end (a sync or stream call: one line per call), where it is a debug line too; a run ended `interrupted`
 * by a process that stopped is a warning.
 */
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics/mod.ts";
import type { RunStatus, TerminalRunStatus } from "../store/mod.ts";
import type { RunChange } from "./change_feed.ts";

/** The instruments a run service records into. */
export type RunMetrics = Pick<Metrics, "runsStarted" | "runsFinished" | "runDuration" | "runQueueTime">;

/** A run that started. */
export interface StartedRun {
  runId: string;
  projectId: string;
  appId: string;
  functionName: string;
  mode: string;
  queueTimeMs: number;
}

/** A run that ended. */
export interface FinishedRun {
  runId: string;
  projectId: string;
  appId: string;
  functionName: string;
  mode: string;
  status: TerminalRunStatus;
  /** Null for a run that never started (cancelled while queued, interrupted before it ran). */
  runTimeMs: number | null;
  errorType?: string | null;
  /** Milliseconds it waited in the queue, when known. */
  queueTimeMs?: number | null;
  /** The caller's request log line reports this end: `run finished` is then a debug line. */
  loggedByCaller?: boolean;
}

/** A run whose first record was written (`queued`, or `running` for a live call). */
export interface CreatedRun {
  runId: string;
  projectId: string;
  appId: string;
  functionName: string;
  mode: string;
  status: RunStatus;
  /** When the record was made (Unix ms): the change's time, even when it is told after a commit. */
  createdAt: number;
}

/** Tells creations, starts and ends. */
export interface RunEvents {
  created(run: CreatedRun): void;
  started(run: StartedRun): void;
  finished(run: FinishedRun): void;
}

function change(run: Omit<CreatedRun, "createdAt">, extra: Partial<RunChange> = {}): RunChange {
  return {
    run_id: run.runId,
    project_id: run.projectId,
    app_id: run.appId,
    function_name: run.functionName,
    mode: run.mode,
    status: run.status,
    at: new Date().toISOString(),
    ...extra,
  };
}

/** Creates the teller; without `metrics` it only logs, without `onChange` it tells no page. */
export function createRunEvents(
  logger: Logger,
  options: {
    metrics?: RunMetrics;
    onChange?(change: RunChange): void;
    /** Whether `onChange` takes a project's changes now (default: always); no change is built for it otherwise. */
    changesWanted?(projectId: string): boolean;
  } = {},
): RunEvents {
  const { metrics, onChange, changesWanted } = options;
  // Checked once: a sync call must not build a line nobody writes.
  const debug = logger.isLevelEnabled("debug");
  // A change costs a date and an object; most runs belong to projects no page follows.
  const tells = (projectId: string) => onChange !== undefined && (changesWanted?.(projectId) ?? true);
  return {
    created(run) {
      if (tells(run.projectId)) onChange!(change(run, { at: new Date(run.createdAt).toISOString() }));
    },
    started(run) {
      if (tells(run.projectId)) {
        // Named, not `{ ...run, status }`: on Node 20 each property after a spread costs ~0.5 µs.
        const { runId, projectId, appId, functionName, mode } = run;
        onChange!(change({ runId, projectId, appId, functionName, mode, status: "running" }));
      }
      const app = `${run.projectId}/${run.appId}`;
      metrics?.runsStarted.inc({ app, mode: run.mode });
      metrics?.runQueueTime.observe({ app, mode: run.mode }, run.queueTimeMs / 1000);
      if (debug) {
        logger.debug(
          { run_id: run.runId, app, function: run.functionName, mode: run.mode, queue_time_ms: run.queueTimeMs },
          "run started",
        );
      }
    },
    finished(run) {
      if (tells(run.projectId)) onChange!(change(run, { run_time_ms: run.runTimeMs }));
      const app = `${run.projectId}/${run.appId}`;
      const labels = { app, mode: run.mode, status: run.status };
      metrics?.runsFinished.inc(labels);
      if (run.runTimeMs !== null) metrics?.runDuration.observe(labels, run.runTimeMs / 1000);
      if (run.loggedByCaller && !debug) return;
      const line = {
        run_id: run.runId,
        app,
        function: run.functionName,
        mode: run.mode,
        status: run.status,
        duration_ms: run.runTimeMs,
        queue_time_ms: run.queueTimeMs ?? null,
        error_type: run.errorType ?? null,
      };
      // A caller's run is `interrupted` when its client left; the request line (`client_gone`) says so.
      if (run.loggedByCaller) logger.debug(line, "run finished");
      else if (run.errorType === "interrupted") logger.warn(line, "run finished: its process stopped while it ran");
      else logger.info(line, "run finished");
    },
  };
}
