/**
 * One classifier from an error to a run's outcome (`classifyFailure`, issue 45): a table of every kind
 * of error an executor (or the run's own signal) can end a run with, and the outcome each stands for;
 * then a sync run and an async run recording the same error the same way, on each engine.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import pino from "pino";
import { ProblemError, PROBLEM_KINDS, type ProblemKind } from "../../server/problems/mod.ts";
import type { ExecutedCall, RunExecutor } from "../../server/runs/executor.ts";
import { classifyFailure, type FailureOutcome, passingReason, toRunError } from "../../server/runs/failure_outcome.ts";
import { RunCancelled, RunTimedOut } from "../../server/runs/_local_runs.ts";
import { createRunService, type Run } from "../../server/runs/mod.ts";
import { AppStartError, NoSeatError, RunFailure } from "../../server/runtime/mod.ts";
import { createSecretBox } from "../../server/secrets/mod.ts";
import { ensureProject, RUN_FAILURE_TYPES } from "../../server/store/mod.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { engines, openTestStore } from "../_helpers/postgres.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const RUN_ID = "run_0000000000aaaaaaaaaaaaaaaa";

/** An error as `pg` (or a socket) throws it: a message and a code. */
function coded(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

function failed(type: string, message: string, options: { passing?: boolean; traceback?: string } = {}) {
  return {
    status: "failure",
    error: { type, message, traceback: options.traceback ?? null },
    passing: options.passing ?? false,
  } satisfies FailureOutcome;
}

const CANCELLED = { status: "cancelled" } satisfies FailureOutcome;

/** One row: what was thrown, and the outcome it stands for. */
interface Row {
  name: string;
  error: unknown;
  outcome: FailureOutcome;
}

const OWN_FAILURES: Row[] = [
  ...RUN_FAILURE_TYPES.map((type) => ({
    name: `RunFailure ${type}`,
    error: new RunFailure(type, `failed: ${type}`, { runId: RUN_ID }),
    outcome: failed(type, `failed: ${type}`),
  })),
  {
    name: "RunFailure of a raised exception (its type name, message and traceback)",
    error: new RunFailure("ValueError", "bad input", { runId: RUN_ID, exception: true, traceback: "Traceback …" }),
    outcome: failed("ValueError", "bad input", { traceback: "Traceback …" }),
  },
  {
    // An own failure is never passing, whatever it is named: the function may have run.
    name: "an error with errorType store_unavailable (a failure read back from a host)",
    error: Object.assign(new Error("the remote's store refused"), {
      errorType: "store_unavailable",
      code: "53300",
    }),
    outcome: failed("store_unavailable", "the remote's store refused"),
  },
];

/** Problem kinds a call that could not start is turned away with, and whether each passes by waiting. */
const PASSING_KINDS: ReadonlySet<ProblemKind> = new Set([
  "service-unavailable",
  "too-many-requests",
  "store-unavailable",
]);

const PROBLEMS: Row[] = [
  ...(Object.keys(PROBLEM_KINDS) as ProblemKind[]).map((kind) => ({
    name: `ProblemError ${kind} without an errorType`,
    error: new ProblemError(kind, `turned away: ${kind}`),
    outcome: failed(kind.replace(/-/g, "_"), `turned away: ${kind}`, { passing: PASSING_KINDS.has(kind) }),
  })),
  {
    name: "NoSeatError (no replica may run it here now)",
    error: new NoSeatError("p/a"),
    outcome: failed("service_unavailable", new NoSeatError("p/a").message, { passing: true }),
  },
  {
    name: "AppStartError (the app cannot load: not passing)",
    error: new AppStartError("main.py raised ImportError"),
    outcome: failed("app_unavailable", "main.py raised ImportError"),
  },
];

const STORE_ERRORS: Row[] = [
  ...[
    coded("sorry, too many clients already", "53300"),
    coded("canceling statement due to statement timeout", "57014"),
    coded("connect ECONNREFUSED 127.0.0.1:5432", "ECONNREFUSED"),
    new Error("Connection terminated unexpectedly"),
    new Error("timeout exceeded when trying to connect"),
    new Error("a seat could not be claimed", { cause: coded("sorry, too many clients already", "53300") }),
  ].map((error) => ({
    name: `store refusal: ${error.message}`,
    error,
    outcome: failed("store_unavailable", error.message, { passing: true }),
  })),
  {
    name: "a store error that is no refusal (a constraint): a bug, not a reason to wait",
    error: coded('duplicate key value violates unique constraint "runs_pkey"', "23505"),
    outcome: failed("upstream_error", 'duplicate key value violates unique constraint "runs_pkey"'),
  },
];

const OTHERS: Row[] = [
  { name: "RunCancelled", error: new RunCancelled(), outcome: CANCELLED },
  {
    name: "RunTimedOut",
    error: new RunTimedOut(30_000),
    outcome: failed("timeout", "The run exceeded its response_grace_period of 30 s and was stopped"),
  },
  {
    name: "an AbortError without an aborted signal",
    error: new DOMException("This operation was aborted", "AbortError"),
    outcome: failed("upstream_error", "This operation was aborted"),
  },
  { name: "a plain Error", error: new Error("socket hang up"), outcome: failed("upstream_error", "socket hang up") },
  {
    name: "an Error with a `type` field (an Error's own type is not a RunError type)",
    error: Object.assign(new TypeError("x is not a function"), { type: "whatever" }),
    outcome: failed("upstream_error", "x is not a function"),
  },
  {
    name: "a RunError-shaped object (an error frame read back)",
    error: { type: "KeyError", message: "'x'", traceback: "Traceback …" },
    outcome: failed("KeyError", "'x'", { traceback: "Traceback …" }),
  },
  { name: "an object with a message only", error: { message: "odd" }, outcome: failed("upstream_error", "odd") },
  { name: "a thrown string", error: "boom", outcome: failed("upstream_error", "boom") },
  { name: "a thrown number", error: 42, outcome: failed("upstream_error", "42") },
  { name: "a thrown undefined", error: undefined, outcome: failed("upstream_error", "undefined") },
  { name: "a thrown null", error: null, outcome: failed("upstream_error", "null") },
];

const TABLE = [...OWN_FAILURES, ...PROBLEMS, ...STORE_ERRORS, ...OTHERS];

describe("classifyFailure", () => {
  for (const row of TABLE) {
    it(`${row.name} → ${describeOutcome(row.outcome)}`, () => {
      assert.deepEqual(classifyFailure(row.error), row.outcome);
    });
  }

  it("toRunError names what the table's failures record, and passingReason answers only the passing ones", () => {
    for (const row of TABLE) {
      const outcome = row.outcome;
      if (outcome.status !== "failure" || row.error instanceof RunTimedOut) continue;
      assert.deepEqual(toRunError(row.error), outcome.error, row.name);
      assert.deepEqual(passingReason(row.error), outcome.passing ? outcome.error : null, row.name);
    }
  });

  describe("once the run's signal was aborted, its reason decides, whatever the call then failed with", () => {
    const errors = [
      new NoSeatError("p/a"),
      new Error("socket hang up"),
      new RunFailure("ValueError", "x", {
        runId: RUN_ID,
        exception: true,
      }),
      coded("sorry, too many clients already", "53300"),
    ];
    const reasons: Array<[string, unknown, FailureOutcome]> = [
      ["cancelRun (RunCancelled)", new RunCancelled(), CANCELLED],
      ["the caller went away", new Error("The client disconnected"), CANCELLED],
      [
        "an abort without a reason (AbortError)",
        new DOMException("This operation was aborted", "AbortError"),
        CANCELLED,
      ],
      [
        "its grace period ran out (RunTimedOut)",
        new RunTimedOut(5_000),
        failed("timeout", "The run exceeded its response_grace_period of 5 s and was stopped"),
      ],
    ];
    for (const [name, reason, outcome] of reasons) {
      it(`${name} → ${describeOutcome(outcome)}`, () => {
        for (const error of errors) {
          assert.deepEqual(classifyFailure(error, { signal: { aborted: true, reason } }), outcome, String(error));
        }
      });
    }

    it("a signal not aborted leaves the error to decide", () => {
      const signal = { aborted: false, reason: undefined };
      assert.deepEqual(classifyFailure(new NoSeatError("p/a"), { signal }), classifyFailure(new NoSeatError("p/a")));
    });
  });
});

function describeOutcome(outcome: FailureOutcome): string {
  if (outcome.status === "cancelled") return "cancelled";
  return `failure ${outcome.error.type}${outcome.passing ? " (passing)" : ""}`;
}

const PROJECT = "p-outcome";
const HOUR = 3_600_000;

for (const engine of await engines()) {
  describe(`a sync run and an async run record one error the same way (${engine})`, () => {
    // Errors an executor rejects with that end an accepted async run at once (a passing one puts it back
    // on the queue instead: test/runs/requeue_test.ts), each with what both runs must record.
    const cases: Array<[string, () => unknown, { type: string; message: string }]> = [
      ["a problem without an error type", () => new AppStartError("The app failed to load"), {
        type: "app_unavailable",
        message: "The app failed to load",
      }],
      ["an unknown function", () => new ProblemError("not-found", "No function g"), {
        type: "not_found",
        message: "No function g",
      }],
      ["a raised exception", () => new RunFailure("ValueError", "bad", { runId: RUN_ID, exception: true }), {
        type: "ValueError",
        message: "bad",
      }],
      ["a plain error", () => new Error("socket hang up"), { type: "upstream_error", message: "socket hang up" }],
      ["a thrown string", () => "boom", { type: "upstream_error", message: "boom" }],
    ];

    it("for each error an executor rejects with", async () => {
      const defer = deferCleanup();
      const scratch = await openTestStore(engine);
      defer(() => scratch.close());
      const { db } = scratch.store;
      await ensureProject(db, PROJECT);
      let throwing: () => unknown = () => undefined;
      const executor: RunExecutor = {
        freeSlots: () => 1,
        gracePeriodMs: () => undefined,
        execute(): Promise<ExecutedCall> {
          return Promise.reject(throwing());
        },
      };
      const runs = createRunService({
        db,
        secrets: createSecretBox(randomBytes(32)),
        logger: pino({ level: "silent" }),
        owner: "owner-a",
        executor,
        pollMs: 20,
        config: { resultTtlMs: HOUR, runLeaseMs: HOUR, webhookAllowPrivate: true },
      });
      defer(() => runs.stop());
      for (const [name, make, expected] of cases) {
        throwing = make;
        const call = { projectId: PROJECT, app: "a", functionName: "f", input: {} };
        await assert.rejects(runs.execute({ ...call, mode: "sync" }));
        const accepted = await runs.submit({ ...call, mode: "async" });
        assert.equal(accepted.kind, "accepted");
        const asyncRun = await ended(runs, (accepted as { runId: string }).runId);
        const { runs: listed } = await runs.listRuns({ projectId: PROJECT, appId: "a" });
        const syncRun = listed.find((run) => run.mode === "sync" && run.status !== "running");
        assert.ok(syncRun, name);
        for (const run of [syncRun, asyncRun]) {
          assert.equal(run.status, "failure", `${name}: ${run.mode}`);
          assert.deepEqual(
            { type: run.error?.type, message: run.error?.message },
            expected,
            `${name}: ${run.mode}`,
          );
        }
        await db.deleteFrom("runs").where("project_id", "=", PROJECT).execute();
      }
    });
  });
}

async function ended(
  runs: { getRun(ref: { projectId: string; appId: string; runId: string }): Promise<Run> },
  runId: string,
): Promise<Run> {
  return await eventually(
    async () => {
      const run = await runs.getRun({ projectId: PROJECT, appId: "a", runId });
      return run.status === "queued" || run.status === "running" ? undefined : run;
    },
    30_000,
    `${runId} to end`,
  );
}
