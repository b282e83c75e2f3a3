/**
 * A run's modes, states and the platform's failure types, listed once (as pg-boss lists its job states): the
 * store's schema, the SQL that names a status, the runs' code and the contract's `RunStatus` all derive
 * from these lists. `test/store/run_states_test.ts` holds them equal to the contract
 * (`generated/openapi.json`), so neither can change alone. The stored values are these strings.
 */

/** How a run can be called; the contract's `RunMode`. */
export const RUN_MODES = ["sync", "async", "stream", "websocket"] as const;

/**
 * How a run was called: `sync`, `async`, `stream` (an async run whose function streams stays `async`) or
 * `websocket` (one WebSocket connection to a custom runtime).
 */
export type RunMode = (typeof RUN_MODES)[number];

/** Every status a run can have, in the order of its life; the contract's `RunStatus`. */
export const RUN_STATUSES = ["queued", "running", "success", "failure", "cancelled"] as const;

/** Where a run is in its life: `queued` and `running` are open, the others terminal. */
export type RunStatus = (typeof RUN_STATUSES)[number];

/** The statuses of a run that has not ended: it may still be claimed, run, ended or cancelled. */
export const OPEN_RUN_STATUSES = ["queued", "running"] as const satisfies readonly RunStatus[];

/** A status of a run that has not ended. */
export type OpenRunStatus = (typeof OPEN_RUN_STATUSES)[number];

/** The statuses a run ends in; a run in one of them never changes status again (a run ends once). */
export const TERMINAL_RUN_STATUSES = ["success", "failure", "cancelled"] as const satisfies readonly RunStatus[];

/** A status a run ends in. */
export type TerminalRunStatus = (typeof TERMINAL_RUN_STATUSES)[number];

const TERMINAL: ReadonlySet<string> = new Set(TERMINAL_RUN_STATUSES);

/**
 * Whether a run in `status` has ended (`success`, `failure` or `cancelled`). The one test of a run's
 * end: a stored row, a buffered row and a status read back all ask it.
 */
export function isTerminal(status: string): status is TerminalRunStatus {
  return TERMINAL.has(status);
}

/**
 * `status` as an SQL string literal (`'queued'`), for statement texts that name a status: a literal,
 * not a parameter, so that the planner sees the value it filters the status index on. Typed, so a
 * status that is not in `RUN_STATUSES` does not compile.
 */
export function sqlStatus(status: RunStatus): string {
  return `'${status}'`;
}

/** `statuses` as an SQL list of literals, `('queued', 'running')` (see `sqlStatus`). */
export function sqlStatusList(statuses: readonly RunStatus[]): string {
  return `(${statuses.map(sqlStatus).join(", ")})`;
}

/**
 * The types the platform gives a run's own failure (the contract's `RunError.type` names each): it timed
 * out, its process stopped while it ran, its worker crashed or ran out of memory, its arguments or result
 * were refused, or the app's server or a host that took the call failed. A raised exception's type is
 * the exception's name instead, which no list holds.
 */
export const RUN_FAILURE_TYPES = [
  "timeout",
  "interrupted",
  "worker_crashed",
  "invalid_arguments",
  "not_serializable",
  "upstream_error",
  "protocol_violation",
  "too_large",
  "bad_batch_result",
  "out-of-memory",
] as const;

/** A type the platform gives a run's own failure (see `RUN_FAILURE_TYPES`). */
export type RunFailureType = (typeof RUN_FAILURE_TYPES)[number];

/**
 * The types of a run that could not start (its function never ran), each the kind of the problem that
 * said why, with underscores — `not_found`: no such app or function; `app_unavailable`: the app cannot
 * load; `service_unavailable`: no replica may run it here now and no host took it; `too_many_requests`:
 * a host's queue was full — or `store_unavailable`: the store refused. (A problem of another kind is
 * named the same way.) The passing ones are `PASSING_START_FAILURE_TYPES`.
 */
export const RUN_START_FAILURE_TYPES = [
  "not_found",
  "app_unavailable",
  "service_unavailable",
  "too_many_requests",
  "store_unavailable",
] as const;

/** A type of a run that could not start (see `RUN_START_FAILURE_TYPES`). */
export type RunStartFailureType = (typeof RUN_START_FAILURE_TYPES)[number];

/**
 * The reasons a run could not start that pass by waiting (the platform's, not the run's): an accepted
 * async run is put back on the queue for them, and ends `failure` with that type only once its deadline
 * has passed. An unknown app or function, or an app that cannot load, does not pass: such a run fails
 * at once.
 */
export const PASSING_START_FAILURE_TYPES = [
  "service_unavailable",
  "too_many_requests",
  "store_unavailable",
] as const satisfies readonly RunStartFailureType[];
