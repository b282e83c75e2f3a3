/**
 * What an executor's error means for a run (issue 44): `toRunError` names it truthfully, and
 * `passingReason` tells a passing reason of the platform's (the run is put back on the queue) from the
 * run's own (it fails).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ProblemError } from "../../server/problems/mod.ts";
import { passingReason, toRunError } from "../../server/runs/executor.ts";
import { NoSeatError, RunFailure } from "../../server/runtime/mod.ts";

/** An error as `pg` (or a socket) throws it: a message and a code. */
function coded(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

const RUN_ID = "run_0000000000aaaaaaaaaaaaaaaa";

describe("passingReason", () => {
  it("puts back a run no replica may run here now, that no host took, or that a host's queue refused", () => {
    const reasons = [
      new NoSeatError("p/a"),
      new ProblemError(
        "service-unavailable",
        "The host at http://h could not be reached to forward the call; try another host",
      ),
      new ProblemError("service-unavailable", "No host could take a call of p/a now; retry"),
      new ProblemError("too-many-requests", "The queue of p/a is full"),
    ];
    for (const error of reasons) {
      const reason = passingReason(error);
      assert.ok(reason, error.message);
      assert.equal(reason.type, error.kind.replace(/-/g, "_"));
      assert.equal(reason.message, error.message);
    }
  });

  it("puts back a run the store refused before its function started, as store_unavailable", () => {
    const refusals = [
      coded("sorry, too many clients already", "53300"),
      coded("canceling statement due to statement timeout", "57014"),
      coded("connect ECONNREFUSED 127.0.0.1:5432", "ECONNREFUSED"),
      new Error("Connection terminated unexpectedly"),
      new Error("timeout exceeded when trying to connect"),
      new ProblemError("store-unavailable", "The store is unavailable; retry"),
    ];
    for (const error of refusals) {
      assert.equal(passingReason(error)?.type, "store_unavailable", error.message);
    }
  });

  it("fails a run for its own reasons: raised, timed out, out of memory, interrupted, a host gone after it took the call", () => {
    const own = [
      new RunFailure("ValueError", "bad input", { runId: RUN_ID, exception: true, traceback: "Traceback …" }),
      new RunFailure("timeout", "The run exceeded its response_grace_period", { runId: RUN_ID }),
      new RunFailure("out-of-memory", "The replica exceeded its memory limit", { runId: RUN_ID }),
      new RunFailure("interrupted", "The run was interrupted before it finished", { runId: RUN_ID }),
      new RunFailure("worker_crashed", "The worker process died during the call", { runId: RUN_ID }),
      new RunFailure("upstream_error", "The host at http://h went away during the call: ECONNRESET", { runId: RUN_ID }),
      // A failure read back from a forwarded call's error frame: the remote's type, whatever it says.
      { errorType: "service_unavailable", errorMessage: "raised by the function", traceback: null },
    ];
    for (const error of own) assert.equal(passingReason(error), null, JSON.stringify(toRunError(error)));
  });

  it("fails at once a run whose app or function is unknown, or whose app cannot load", () => {
    assert.equal(passingReason(new ProblemError("not-found", "No function f in p/a")), null);
    assert.equal(passingReason(new ProblemError("app-unavailable", "App p/a failed to load: SyntaxError")), null);
    assert.equal(passingReason(new ProblemError("unprocessable", "Bad arguments")), null);
  });

  it("fails a run for any other error: a bug is not a reason to wait", () => {
    assert.equal(passingReason(new TypeError("x is undefined")), null);
    assert.equal(passingReason(coded("duplicate key value violates unique constraint", "23505")), null);
    assert.equal(passingReason(undefined), null);
    assert.equal(passingReason("a string"), null);
  });
});

describe("toRunError", () => {
  it("keeps a failure's own type, message and traceback", () => {
    const error = new RunFailure("ValueError", "bad input", { runId: RUN_ID, exception: true, traceback: "tb" });
    assert.deepEqual(toRunError(error), { type: "ValueError", message: "bad input", traceback: "tb" });
    assert.deepEqual(toRunError({ type: "KeyError", message: "k", traceback: null }), {
      type: "KeyError",
      message: "k",
      traceback: null,
    });
  });

  it("names a call that could not start by its problem's kind, not upstream_error", () => {
    assert.equal(toRunError(new NoSeatError("p/a")).type, "service_unavailable");
    assert.equal(toRunError(new ProblemError("not-found", "No app p/a")).type, "not_found");
    assert.equal(toRunError(new ProblemError("app-unavailable", "App p/a failed to load")).type, "app_unavailable");
  });

  it("names the store refusing store_unavailable, not upstream_error", () => {
    const error = coded("sorry, too many clients already", "53300");
    assert.deepEqual(toRunError(error), {
      type: "store_unavailable",
      message: "sorry, too many clients already",
      traceback: null,
    });
  });

  it("keeps upstream_error for any other error", () => {
    assert.deepEqual(toRunError(new Error("socket hang up")), {
      type: "upstream_error",
      message: "socket hang up",
      traceback: null,
    });
  });
});
