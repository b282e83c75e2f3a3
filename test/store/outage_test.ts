import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { createStoreOutage, quietDuringOutages, storeUnavailableReason } from "../../server/store/mod.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

/** A logger whose lines are kept, parsed, in `lines`. */
function capturedLogger() {
  const lines: Array<Record<string, unknown>> = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  return { lines, logger: createLogger({ destination }) };
}

function pgError(code: string, message = "boom"): Error {
  return Object.assign(new Error(message), { code });
}

describe("storeUnavailableReason", () => {
  it("knows the store being away on both engines, through causes and aggregates", () => {
    for (const code of ["57P01", "57P02", "57P03", "08006", "08001", "53300", "53100", "57014", "25006"]) {
      assert.ok(storeUnavailableReason(pgError(code)), code);
    }
    assert.ok(storeUnavailableReason(pgError("SQLITE_FULL")));
    assert.ok(storeUnavailableReason(pgError("SQLITE_BUSY")));
    assert.ok(storeUnavailableReason(pgError("SQLITE_IOERR_WRITE")));
    assert.ok(storeUnavailableReason(new Error("Connection terminated unexpectedly")));
    assert.ok(storeUnavailableReason(new Error("timeout exceeded when trying to connect")));
    assert.ok(storeUnavailableReason(new AggregateError([pgError("ECONNREFUSED"), pgError("ECONNREFUSED")])));
    assert.ok(storeUnavailableReason(new Error("record not stored", { cause: pgError("57P01") })));
  });

  it("leaves statements' own errors alone", () => {
    for (const code of ["23505", "23503", "42P01", "SQLITE_CONSTRAINT_UNIQUE", "SQLITE_ERROR"]) {
      assert.equal(storeUnavailableReason(pgError(code)), null, code);
    }
    assert.equal(storeUnavailableReason(new Error("no such table: runs")), null);
    assert.equal(storeUnavailableReason(undefined), null);
  });
});

describe("createStoreOutage", () => {
  it("logs an outage once when it starts and once, with the count of 503s answered, when a probe writes again", async () => {
    const { lines, logger } = capturedLogger();
    let storeBack = false;
    const outage = createStoreOutage({
      logger,
      probe: () => (storeBack ? Promise.resolve() : Promise.reject(pgError("57P03"))),
      probeMs: 20,
      quietMs: 50,
    });
    try {
      assert.equal(outage.active, false);
      assert.equal(outage.refused(pgError("23505")), false, "a unique violation is not an outage");
      for (let i = 0; i < 100; i++) assert.equal(outage.refused(pgError("57P01")), true);
      // The requests answered 503 are counted where they are answered, once each: not every refused
      // operation behind them (a background loop's, a retry's) is one.
      for (let i = 0; i < 7; i++) outage.answered();
      assert.equal(outage.active, true);
      assert.match(outage.reason ?? "", /57P01/);
      assert.equal(outage.refusesWrites, false, "an unreachable store is not a full one");
      outage.refused(new Error("not stored", { cause: pgError("SQLITE_FULL") }));
      assert.equal(outage.refusesWrites, true, "a full disk refuses writes");
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(outage.active, true, "a probe the store refuses keeps the outage on");
      storeBack = true;
      await eventually(async () => (outage.active ? undefined : true), 5_000, "the outage to end");
      const said = lines.map((line) => line.msg);
      assert.equal(said.filter((msg) => String(msg).startsWith("store unavailable")).length, 1);
      const back = lines.find((line) => String(line.msg).startsWith("store available again"));
      assert.equal(back?.refused, 7);
      assert.equal(outage.refusesWrites, false);
      assert.equal(lines.length, 2, "two lines for 101 refused operations");
    } finally {
      outage.close();
    }
  });
});

describe("a full store's outage", () => {
  it("does not end while real work is still refused after a probe wrote: one outage, one end, no flap", async () => {
    const { lines, logger } = capturedLogger();
    let stillFull = true;
    // The outage as each refusal that followed a probe's write left it (read then, not at a moment of
    // the test's choosing: between a probe's write and the refusal after it, writes are let through).
    const afterRefusals: Array<{ active: boolean; refusesWrites: boolean }> = [];
    const outage = createStoreOutage({
      logger,
      // The probe's small write fits on the full disk; the work let through after it does not, until
      // space is back (as a run's end retried in the background found, a few ms after the probe).
      probe: () => {
        if (stillFull) {
          setTimeout(() => {
            outage.refused(pgError("SQLITE_FULL"));
            afterRefusals.push({ active: outage.active, refusesWrites: outage.refusesWrites });
          }, 5);
        }
        return Promise.resolve();
      },
      probeMs: 20,
      // Long beside the few ms between a probe and the refusal after it, so that a loaded machine's late
      // timers do not end the outage in between (a real flap would need a quiet second).
      quietMs: 1_000,
    });
    try {
      outage.refused(pgError("SQLITE_FULL"));
      assert.equal(outage.refusesWrites, true);
      await eventually(async () => (afterRefusals.length >= 4 ? true : undefined), 10_000, "several probes to write");
      assert.ok(afterRefusals.every((state) => state.active), "still full: the outage goes on");
      assert.ok(
        afterRefusals.every((state) => state.refusesWrites),
        "a refusal after the probe wrote refuses writes again",
      );
      stillFull = false;
      await eventually(async () => (outage.active ? undefined : true), 10_000, "the outage to end");
      const said = lines.map((line) => String(line.msg));
      assert.equal(said.filter((msg) => msg.startsWith("store unavailable")).length, 1, said.join("\n"));
      assert.equal(said.filter((msg) => msg.startsWith("store available again")).length, 1, said.join("\n"));
    } finally {
      outage.close();
    }
  });
});

describe("quietDuringOutages", () => {
  it("counts a background loop's store errors toward the outage instead of writing them; other lines pass", () => {
    const { lines, logger } = capturedLogger();
    const outage = createStoreOutage({ logger, probe: () => Promise.reject(pgError("57P03")) });
    try {
      const quiet = quietDuringOutages(logger, outage);
      for (let i = 0; i < 10; i++) quiet.error({ err: pgError("ECONNREFUSED") }, "dispatching queued runs failed");
      quiet.error({ err: pgError("23505") }, "a bug, not an outage");
      quiet.warn("no error at all");
      quiet.child({ run_id: "r" }).info("a child line");
      assert.deepEqual(lines.map((line) => line.msg), [
        "store unavailable: operations answer 503 store-unavailable until a probe can write",
        "a bug, not an outage",
        "no error at all",
        "a child line",
      ]);
      assert.equal(lines[3].run_id, "r");
    } finally {
      outage.close();
    }
  });
});
