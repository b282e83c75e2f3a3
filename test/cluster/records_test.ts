/**
 * The cluster's statements on both engines: a claim takes the lowest seat with no row or a stale one
 * and leaves live ones alone, a renewal reports the seats no longer held (taken over or deleted), a
 * release deletes only its holder's seat, and the stale-row deletions and the host upsert keep what
 * they should.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";
import { deleteHost, deleteStaleHosts, selectLiveHosts, upsertHost } from "../../server/cluster/_host_records.ts";
import {
  claimSeat,
  deleteHostSeats,
  deleteStaleSeats,
  releaseSeat,
  renewSeats,
  selectLiveSeats,
} from "../../server/cluster/_seat_records.ts";

const P = "proj_records";

for (const engine of await engines()) {
  describe(`cluster records (${engine})`, () => {
    let t: TestStore;
    before(async () => (t = await openTestStore(engine)));
    after(() => t?.close());

    function claim(appId: string, hostId: string, now: number, limit = 3) {
      return claimSeat(t.store.db, { projectId: P, appId, hostId, limit, slots: 2, now, staleBefore: now - 1_000 });
    }

    it("claims the lowest seat that has no row or a stale one, and none when all are live", async () => {
      assert.equal(await claim("lowest", "h1", 10_000), 0);
      assert.equal(await claim("lowest", "h2", 10_000), 1);
      assert.equal(await claim("lowest", "h3", 10_500), 2);
      assert.equal(await claim("lowest", "h4", 10_900), null);
      // At 11 200 the seats renewed at 10 000 are stale: the lowest goes first.
      assert.equal(await claim("lowest", "h4", 11_200), 0);
      assert.equal(await claim("lowest", "h5", 11_200), 1);
      assert.equal(await claim("lowest", "h6", 11_200), null);
      const seats = await selectLiveSeats(t.store.db, { seenSince: 0 });
      assert.deepEqual(
        seats.filter((s) => s.app_id === "lowest").map((s) => [s.seat, s.host_id, s.state, s.busy, s.claimed_at]),
        [[0, "h4", "starting", 0, 11_200], [1, "h5", "starting", 0, 11_200], [2, "h3", "starting", 0, 10_500]],
      );
    });

    it("renews the seats still held and reports those taken over or deleted as lost", async () => {
      assert.equal(await claim("renew", "h1", 20_000), 0);
      assert.equal(await claim("renew", "h1", 20_000), 1);
      assert.equal(await claim("renew", "h1", 20_000), 2);
      assert.equal(await claim("renew", "h2", 21_500, 1), 0); // seat 0 was stale at 21 500
      assert.equal(await releaseSeat(t.store.db, { projectId: P, appId: "renew", seat: 1, hostId: "h2" }), false);
      await t.store.db.deleteFrom("replica_seats").where("app_id", "=", "renew").where("seat", "=", 1).execute();
      const lost = await renewSeats(t.store.db, {
        hostId: "h1",
        now: 22_000,
        seats: [0, 1, 2].map((seat) => ({ projectId: P, appId: "renew", seat, state: "ready" as const, busy: seat })),
      });
      assert.deepEqual(lost, [{ projectId: P, appId: "renew", seat: 0 }, { projectId: P, appId: "renew", seat: 1 }]);
      const rows = (await selectLiveSeats(t.store.db, { seenSince: 0 })).filter((s) => s.app_id === "renew");
      assert.deepEqual(rows.map((s) => [s.seat, s.host_id, s.state, s.busy, s.seen_at]), [
        [0, "h2", "starting", 0, 21_500],
        [2, "h1", "ready", 2, 22_000],
      ]);
      assert.equal(await releaseSeat(t.store.db, { projectId: P, appId: "renew", seat: 2, hostId: "h1" }), true);
      await deleteHostSeats(t.store.db, "h2");
      assert.deepEqual((await selectLiveSeats(t.store.db, { seenSince: 0 })).filter((s) => s.app_id === "renew"), []);
    });

    it("deletes stale seats and hosts only, and keeps a host's first start time", async () => {
      const host = { url: "http://a.test", cpu: 1.5, memory_bytes: 8 * 2 ** 30, gpus: 1 };
      await upsertHost(t.store.db, { host_id: "old", ...host, started_at: 1, seen_at: 1_000 });
      await upsertHost(t.store.db, { host_id: "new", ...host, started_at: 2, seen_at: 2_000 });
      await upsertHost(t.store.db, { host_id: "new", ...host, gpus: 2, started_at: 3, seen_at: 3_000 });
      assert.deepEqual(await selectLiveHosts(t.store.db, { seenSince: 2_500 }), [
        { host_id: "new", ...host, gpus: 2, started_at: 2, seen_at: 3_000 },
      ]);
      assert.equal(await deleteStaleHosts(t.store.db, { seenBefore: 2_500 }), 1);
      assert.equal(await claim("stale", "new", 5_000), 0);
      assert.equal(await deleteStaleSeats(t.store.db, { seenBefore: 5_000 }), 0);
      assert.equal(await deleteStaleSeats(t.store.db, { seenBefore: 5_001 }) >= 1, true);
      await deleteHost(t.store.db, "new");
      assert.deepEqual(await selectLiveHosts(t.store.db, { seenSince: 0 }), []);
    });
  });
}
