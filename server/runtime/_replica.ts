/**
 * What every kind of replica is to whoever calls it: one `call()`. The kinds are a Python worker
 * (`PythonReplica`, over its own pipes, or over a channel of a replica another process of the host owns),
 * an app's own HTTP server (`CustomProcessReplica`), an external url (`UrlUpstream`) and a replica that
 * could not be given a process (`FailedReplica`). The runtime, a host's worker and the contract suite
 * (`test/runtime/replica_contract_test.ts`) call each through this interface alone.
 */
import type { AbortSignalLike } from "../abort/mod.ts";
import type { CallOutcome, HttpCall } from "./_outcome.ts";
import type { Replica } from "./_replica_pool.ts";

/** One call of an app's function on a replica. */
export interface ReplicaCall {
  /** The run's id: a Python function's `run_id`, a custom runtime's `X-Request-Id`. */
  runId: string;
  /** The function to run (a custom runtime's path after the app). */
  functionName: string;
  /** The function's keyword arguments: the call's JSON body (a custom runtime is POSTed it). */
  kwargs: Record<string, unknown>;
  /** `kwargs` as the JSON text the caller sent, forwarded as is (so 2^60 and 1e400 arrive as sent). */
  kwargsJson?: string;
  /** A custom runtime's route called by another method than POST: passed as HTTP (a Python replica refuses it). */
  http?: HttpCall;
  /** How long the call may run (the app's `response_grace_period`): past it, it fails with `timeout`. */
  graceMs: number;
  /** Aborting interrupts the call: it fails with `interrupted`, and the replica stops it. */
  signal?: AbortSignalLike;
  /**
   * Called once when the call is over on the replica (result, failure, stream end or stop, cancel,
   * crash): its slot is free then.
   */
  onSettled(): void;
}

/**
 * A replica that runs calls. `call` resolves with a result, or with a stream once the function started
 * one (read its items to the end, or stop reading to stop it); it rejects with a `RunFailure` when the run
 * failed (its `errorType`: the exception's class, `timeout`, `interrupted`, `out_of_memory`,
 * `worker_crashed`, `protocol_violation`, `upstream_error`…) or a `ProblemError` when the call could not
 * be run (an unknown function, arguments that cannot be sent). Call it only while `usable` once `ready`
 * resolved: its pool, or a host's worker, sees to that.
 */
export interface CallableReplica extends Replica {
  call(call: ReplicaCall): Promise<CallOutcome>;
}
