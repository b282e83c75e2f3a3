/**
 * Wake-ups between stores on both engines: a notify from one store reaches the listeners of another
 * (a separate open, as another process would have) within a second; PostgreSQL sends one made inside a
 * transaction on commit only, and its listener reconnects after its session is ended.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { sql } from "kysely";
import {
  LISTENER_APPLICATION_NAME,
  MAX_WAKE_PAYLOAD_BYTES,
  openStore,
  type Store,
  type WakeChannel,
} from "../../server/store/mod.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

/** Collects wake-ups of one channel and waits for the next one. */
function collect(store: Store, channel: WakeChannel): {
  received: Array<string | undefined>;
  next(timeoutMs: number): Promise<{ payload: string | undefined; at: number }>;
  stop(): void;
} {
  const received: Array<string | undefined> = [];
  let waiting: ((payload: string | undefined) => void) | undefined;
  const stop = store.notifier.listen(channel, (payload) => {
    received.push(payload);
    waiting?.(payload);
  });
  return {
    received,
    stop,
    next(timeoutMs) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiting = undefined;
          reject(new Error(`no wake-up on ${channel} within ${timeoutMs} ms`));
        }, timeoutMs);
        waiting = (payload) => {
          clearTimeout(timer);
          waiting = undefined;
          resolve({ payload, at: performance.now() });
        };
      });
    },
  };
}

for (const engine of await engines()) {
  describe(`wake-ups (${engine})`, () => {
    let t: TestStore;
    let other: Store;
    before(async () => {
      t = await openTestStore(engine);
      other = await openStore(t.dataDir, { databaseUrl: t.databaseUrl, migrate: false });
    });
    after(async () => {
      await other?.close();
      await t?.close();
    });

    it("listening() resolves at once while nothing is listened to", async () => {
      // A store that has listened to nothing has no listening session to wait for.
      const resolved = await Promise.race([
        other.notifier.listening().then(() => true),
        new Promise<false>((resolve) => setTimeout(() => resolve(false), 2_000)),
      ]);
      assert.equal(resolved, true);
    });

    it("a notify from one store reaches a listener of another within a second, with its ids or with none", async () => {
      const runs = collect(t.store, "runplane_runs");
      const deliveries = collect(t.store, "runplane_deliveries");
      try {
        await t.store.notifier.listening();
        let arrival = runs.next(1_000);
        let sent = performance.now();
        await other.notifier.notify("runplane_runs", "run-1,run-2");
        let got = await arrival;
        assert.equal(got.payload, "run-1,run-2");
        assert.ok(got.at - sent < 1_000);

        arrival = runs.next(1_000);
        sent = performance.now();
        await other.notifier.notify("runplane_runs");
        got = await arrival;
        assert.equal(got.payload, undefined, "a bare wake-up");
        assert.deepEqual(deliveries.received, [], "another channel heard nothing");

        // The sender's own listeners hear it too (another part of the same process).
        const own = collect(other, "runplane_deliveries");
        await other.notifier.listening();
        const both = Promise.all([own.next(1_000), deliveries.next(1_000)]);
        await t.store.notifier.notify("runplane_deliveries", "d-1");
        assert.deepEqual((await both).map((g) => g.payload), ["d-1", "d-1"]);
        own.stop();
      } finally {
        runs.stop();
        deliveries.stop();
      }
    });

    it("a stopped listener hears nothing more", async () => {
      const cancels = collect(t.store, "runplane_cancel");
      const witness = collect(t.store, "runplane_cancel");
      await t.store.notifier.listening();
      cancels.stop();
      const arrival = witness.next(1_000);
      await other.notifier.notify("runplane_cancel", "run-9");
      await arrival;
      assert.deepEqual(cancels.received, []);
      witness.stop();
    });

    it("refuses an unknown channel and a payload too large to be a list of ids", async () => {
      await assert.rejects(
        other.notifier.notify("runplane_runs", "x".repeat(MAX_WAKE_PAYLOAD_BYTES + 1)),
        /too large: send ids or nothing/,
      );
      await assert.rejects(other.notifier.notify("elsewhere" as WakeChannel), /Unknown wake-up channel/);
      assert.throws(() => t.store.notifier.listen("elsewhere" as WakeChannel, () => {}), /Unknown wake-up channel/);
    });

    if (engine === "postgres") {
      it("a notify inside a transaction is sent when it commits, and never when it rolls back", async () => {
        const runs = collect(t.store, "runplane_runs");
        try {
          await t.store.notifier.listening();
          await other.db.transaction().execute(async (trx) => {
            await other.notifier.notify("runplane_runs", "rolled-back", { db: trx });
            throw new Error("roll back");
          }).catch(() => {});
          const arrival = runs.next(2_000);
          await other.db.transaction().execute(async (trx) => {
            await other.notifier.notify("runplane_runs", "committed", { db: trx });
            await new Promise((resolve) => setTimeout(resolve, 300));
            assert.deepEqual(runs.received, [], "nothing before the commit");
          });
          assert.equal((await arrival).payload, "committed");
          assert.deepEqual(runs.received, ["committed"]);
        } finally {
          runs.stop();
        }
      });

      it("the listener reconnects after its session is ended, waking its listeners once it is back", async () => {
        const runs = collect(t.store, "runplane_runs");
        try {
          await t.store.notifier.listening();
          const listenerPid = async () =>
            (await sql<{ pid: number }>`select pid from pg_stat_activity
              where application_name = ${LISTENER_APPLICATION_NAME} and datname = current_database()`.execute(other.db))
              .rows.map((r) => r.pid);
          // Both stores have listened by now: end every listening session of this database.
          const before = await listenerPid();
          assert.ok(before.length >= 1, "a listening session");
          const wokenAfterReconnect = runs.next(10_000);
          await sql`select pg_terminate_backend(pid) from pg_stat_activity
            where application_name = ${LISTENER_APPLICATION_NAME} and datname = current_database()`.execute(other.db);
          assert.equal((await wokenAfterReconnect).payload, undefined, "a bare wake-up once it is back");
          await t.store.notifier.listening();
          const now = await listenerPid();
          assert.ok(now.length >= 1);
          assert.deepEqual(now.filter((pid) => before.includes(pid)), [], "new sessions");
          const arrival = runs.next(1_000);
          await other.notifier.notify("runplane_runs", "after-reconnect");
          assert.equal((await arrival).payload, "after-reconnect");
        } finally {
          runs.stop();
        }
      });
    }
  });
}
