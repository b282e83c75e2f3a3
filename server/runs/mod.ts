/**
 * Runs: durable run records, submitting calls (sync, stream, async), the async dispatcher, cancel,
 * result expiry, restart recovery and `Idempotency-Key`. The runtime is reached only through the
 * `RunExecutor` it is given.
 */
export { encodeCursor } from "./_cursor.ts";
export { DEFAULT_GRACE_MS, MAX_GRACE_MS } from "./_dispatcher.ts";
export type { RunExecution } from "./_execute_run.ts";
export { runOwnersDir } from "./_owners.ts";
export { queuedRunsByApp } from "./_queries.ts";
export type { Run } from "./_view.ts";
export type {
  AppLogLine,
  AppLogOptions,
  AppLogPage,
  AppRef,
  AppStats,
  AppStatsBucket,
  AppStatsWindow,
} from "./app_insights.ts";
export { type AppSamplerOptions, type SampledReplicas, startAppSampler } from "./app_samples.ts";
export { createRunChangeFeed, type RunChange, type RunChangeFeed, type RunChangeListener } from "./change_feed.ts";
export {
  type AppTarget,
  type ExecutedCall,
  type ExecutedItem,
  type ExecuteRequest,
  type HttpRequestPart,
  type HttpResponsePart,
  type RunExecutor,
} from "./executor.ts";
export {
  classifyFailure,
  type ClassifyOptions,
  type FailureOutcome,
  type RunErrorInfo,
  toRunError,
} from "./failure_outcome.ts";
export type { LiveRun, RunCall, RunLogFields, RunMode, RunRecorder, WebSocketCounters } from "./run_call.ts";
export { isRunId, newRunId } from "./run_id.ts";
export {
  createRunLogWriter,
  type OutputLineInput,
  type RunLog,
  type RunLogLine,
  type RunLogWriter,
} from "./run_logs.ts";
export {
  createRunService,
  type ExecuteOptions,
  type Execution,
  type ListProjectRunsOptions,
  type ListRunsOptions,
  type RunPage,
  type RunRef,
  type RunService,
  type RunServiceOptions,
  type RunSettings,
  type Submission,
} from "./service.ts";
