/**
 * The cluster registry on both engines: on PostgreSQL several registries on separate pools, as
 * separate processes would have them; on SQLite (one process) on one store. Claims never give an app more seats than
 * its limit, a released seat is claimable, a host that stops heartbeating loses its seats a lease later
 * and is told so, a claim reaches the other hosts' views by a wake-up (and by polling alone without
 * one), `stop()` removes the host, and a heartbeat that fails is logged and retried.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { waitFor } from "../_helpers/apps.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import {
  type ClusterRegistry,
  type ClusterRegistryOptions,
  createClusterRegistry,
  type SeatKey,
  type SeatState,
} from "../../server/cluster/mod.ts";
import { createLogger } from "../../server/log.ts";
import { openStore, type Store } from "../../server/store/mod.ts";
import { localNotifier } from "../../server/store/notifier.ts";

const PROJECT = "proj_cluster";
const LEASE_MS = 5_000;
/** A heartbeat that never comes during a test: the host is silent unless the test acts. */
const NEVER_MS = 1_000_000_000;

const silent = createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, done) => done() }) });

/** A promise and the function that resolves it. */
function deferred<T>(): { promise: Promise<T>; resolve(value: T): void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

for (const engine of await engines()) {
  describe(`cluster registry (${engine})`, () => {
    let dataDir: string;
    let database: TestDatabase | null = null;
    const stores: Store[] = [];
    const registries: ClusterRegistry[] = [];
    let hosts = 0;

    async function open(): Promise<Store> {
      return await openStore(dataDir, { databaseUrl: database?.url ?? null, poolSize: 3 });
    }

    before(async () => {
      dataDir = await mkdtemp(join(tmpdir(), "runplane-cluster-"));
      if (engine === "postgres") database = await createTestDatabase();
      // One after the other: the first applies the migrations. SQLite serves one process, on one store.
      for (let i = 0; i < (engine === "postgres" ? 5 : 1); i++) stores.push(await open());
    });
    after(async () => {
      for (const registry of registries) await registry.stop();
      for (const store of stores) await store.close();
      await database?.drop();
      await rm(dataDir, { recursive: true, force: true });
    });

    /**
     * A registry on `stores[index]` (PostgreSQL; the one store on SQLite), as host `host_<n>` at
     * `http://host-<n>.test`.
     */
    function registryOn(index: number, options: Partial<ClusterRegistryOptions> = {}): ClusterRegistry {
      const store = storeFor(index);
      const n = hosts++;
      const registry = createClusterRegistry({
        db: store.db,
        now: () => store.clock.now(),
        notifier: store.notifier,
        logger: silent,
        hostId: `host_${n}`,
        url: `http://host-${n}.test`,
        capacity: { cpu: 2, memoryBytes: 4 * 2 ** 30, gpus: n % 2 },
        leaseMs: LEASE_MS,
        heartbeatMs: NEVER_MS,
        seatStates: () => [],
        ...options,
      });
      registries.push(registry);
      return registry;
    }

    function storeFor(index: number): Store {
      return stores[index % stores.length];
    }

    async function seatRows(appId: string) {
      return await stores[0].db.selectFrom("replica_seats").selectAll().where("project_id", "=", PROJECT)
        .where("app_id", "=", appId).orderBy("seat").execute();
    }

    it("gives an app no more seats than its limit when five hosts claim at once", async () => {
      const claimers = [0, 1, 2, 3, 4].map((index) => registryOn(index));
      await Promise.all(claimers.map((registry) => registry.start()));
      const apps = ["race-a", "race-b", "race-c", "race-d", "race-e", "race-f"];
      await Promise.all(apps.map(async (appId) => {
        const claimed = await Promise.all(
          claimers.map((registry) => registry.claimSeat({ projectId: PROJECT, appId, limit: 2, slots: 1 })),
        );
        const seats = claimed.filter((seat) => seat !== null).sort();
        assert.deepEqual(seats, [0, 1], `${appId}: ${JSON.stringify(claimed)}`);
        const rows = await seatRows(appId);
        assert.deepEqual(rows.map((row) => row.seat), [0, 1]);
        assert.equal(new Set(rows.map((row) => row.host_id)).size, 2, JSON.stringify(rows));
      }));
      for (const registry of claimers) await registry.stop();
    });

    it("lets another host claim a released seat, and only its holder release it", async () => {
      const [a, b] = [registryOn(0), registryOn(1)];
      await Promise.all([a.start(), b.start()]);
      const request = { projectId: PROJECT, appId: "released", limit: 1, slots: 2 };
      assert.equal(await a.claimSeat(request), 0);
      assert.equal(await b.claimSeat(request), null);
      await b.releaseSeat({ projectId: PROJECT, appId: "released", seat: 0 });
      assert.equal(await b.claimSeat(request), null, "a host released a seat it does not hold");
      await a.releaseSeat({ projectId: PROJECT, appId: "released", seat: 0 });
      assert.equal(a.view().seats.some((s) => s.appId === "released"), false);
      assert.equal(await b.claimSeat(request), 0);
      assert.deepEqual((await seatRows("released")).map((row) => [row.seat, row.host_id, row.slots]), [[
        0,
        b.hostId,
        2,
      ]]);
      await a.stop();
      await b.stop();
    });

    /**
     * Host `a` claims seat 0 of `appId` and then stays silent; host `b`, whose clock runs a lease and
     * a second ahead, heartbeats every 50 ms. Resolves once `b` has claimed the seat.
     */
    async function takeOver(appId: string, aOptions: Partial<ClusterRegistryOptions> = {}) {
      const a = registryOn(0, aOptions);
      let ahead = 0;
      const b = registryOn(1, { now: () => storeFor(1).clock.now() + ahead, heartbeatMs: 50 });
      await Promise.all([a.start(), b.start()]);
      const request = { projectId: PROJECT, appId, limit: 1, slots: 1 };
      assert.equal(await a.claimSeat(request), 0);
      assert.equal(await b.claimSeat(request), null, "a live host's seat was taken");
      ahead = LEASE_MS + 1_000;
      await waitFor(() => !b.view().hosts.some((h) => h.hostId === a.hostId), "the silent host to leave the view");
      assert.equal(b.view().seats.some((s) => s.appId === appId), false, JSON.stringify(b.view().seats));
      assert.equal(await b.claimSeat(request), 0);
      return { a, b };
    }

    it("gives the seats of a host that stopped heartbeating to a claimer after the lease", async () => {
      const { a, b } = await takeOver("silent");
      const rows = await seatRows("silent");
      assert.deepEqual(rows.map((row) => [row.seat, row.host_id, row.state]), [[0, b.hostId, "starting"]]);
      // The live host's heartbeat deletes the silent host's row (its view, re-read on a wake-up, may drop
      // the silent host before that heartbeat runs).
      await waitFor(
        async () =>
          (await stores[0].db.selectFrom("hosts").select("host_id").where("host_id", "=", a.hostId).execute())
            .length === 0,
        "the live host's heartbeat to delete the silent host's row",
      );
      const seat = b.view().seats.find((s) => s.appId === "silent");
      assert.equal(seat?.hostId, b.hostId);
      assert.equal(seat?.url, `http://${b.hostId.replace("_", "-")}.test`);
      await a.stop();
      await b.stop();
    });

    it("tells a host that renews a seat taken over meanwhile that it lost it", async () => {
      const lost = deferred<SeatKey[]>();
      const held: SeatState[] = [{ projectId: PROJECT, appId: "lost", seat: 0, state: "ready", busy: 1 }];
      const { a, b } = await takeOver("lost", { seatStates: () => held, onSeatsLost: lost.resolve });
      a.changed();
      assert.deepEqual(await lost.promise, [{ projectId: PROJECT, appId: "lost", seat: 0 }]);
      // The renewal changed nothing of the new holder's row.
      const rows = await seatRows("lost");
      assert.deepEqual(rows.map((row) => [row.host_id, row.state, row.busy]), [[b.hostId, "starting", 0]]);
      await a.stop();
      await b.stop();
    });

    it("shows a claim and a change of calls in flight in another host's view by a wake-up, before any heartbeat", async () => {
      let states: SeatState[] = [];
      const a = registryOn(0, { seatStates: () => states });
      const b = registryOn(1);
      await Promise.all([a.start(), b.start()]);
      // A wake-up that never arrives fails the test after 10 s instead of holding it until the suite's timeout.
      const seen = (check: () => boolean) => {
        const done = deferred<void>();
        const stop = b.onViewChange(() => check() && done.resolve());
        let timer: ReturnType<typeof setTimeout> | undefined;
        const late = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error("no wake-up changed the other host's view within 10 s")), 10_000);
        });
        return Promise.race([done.promise, late]).finally(() => {
          clearTimeout(timer);
          stop();
        });
      };
      const seatOf = () => b.view().seats.find((s) => s.appId === "woken");
      const claimed = seen(() => seatOf() !== undefined);
      assert.equal(await a.claimSeat({ projectId: PROJECT, appId: "woken", limit: 3, slots: 4 }), 0);
      await claimed;
      assert.deepEqual(seatOf(), {
        projectId: PROJECT,
        appId: "woken",
        seat: 0,
        hostId: a.hostId,
        url: `http://${a.hostId.replace("_", "-")}.test`,
        state: "starting",
        slots: 4,
        busy: 0,
      });
      const ready = seen(() => seatOf()?.state === "ready" && seatOf()?.busy === 3);
      states = [{ projectId: PROJECT, appId: "woken", seat: 0, state: "ready", busy: 3 }];
      a.changed();
      await ready;
      await a.stop();
      await b.stop();
    });

    it("shows a claim in another host's view by its heartbeat alone when no wake-up reaches it", async () => {
      const a = registryOn(0);
      // A real notifier on which no host announces anything: `b` hears no wake-up.
      const deaf = localNotifier(join(dataDir, "nobody-announces-here"));
      const b = registryOn(1, { notifier: deaf, heartbeatMs: 100 });
      await Promise.all([a.start(), b.start()]);
      assert.equal(await a.claimSeat({ projectId: PROJECT, appId: "polled", limit: 1, slots: 1 }), 0);
      await waitFor(() => b.view().seats.some((s) => s.appId === "polled" && s.hostId === a.hostId), "b's heartbeat");
      await a.stop();
      await b.stop();
      await deaf.close();
    });

    it("removes the host and its seats on stop()", async () => {
      const a = registryOn(2);
      const b = registryOn(3);
      await Promise.all([a.start(), b.start()]);
      assert.equal(await a.claimSeat({ projectId: PROJECT, appId: "stopped", limit: 2, slots: 1 }), 0);
      await b.refresh();
      assert.ok(b.view().hosts.some((h) => h.hostId === a.hostId));
      const gone = deferred<void>();
      b.onViewChange(() => !b.view().hosts.some((h) => h.hostId === a.hostId) && gone.resolve());
      await a.stop();
      assert.deepEqual(await seatRows("stopped"), []);
      const hostRows = await stores[0].db.selectFrom("hosts").select("host_id").where("host_id", "=", a.hostId)
        .execute();
      assert.deepEqual(hostRows, []);
      await gone.promise;
      assert.equal(b.view().seats.some((s) => s.appId === "stopped"), false);
      await assert.rejects(a.claimSeat({ projectId: PROJECT, appId: "stopped", limit: 2, slots: 1 }), /stopped/);
      await b.stop();
    });

    it("logs a heartbeat that fails and retries it at the next tick, never throwing", async () => {
      const store = await open();
      const lines: Array<{ level: number; msg: string }> = [];
      const logger = createLogger({
        level: "warn",
        destination: new Writable({
          write(chunk, _encoding, done) {
            lines.push(JSON.parse(String(chunk)));
            done();
          },
        }),
      });
      const registry = createClusterRegistry({
        db: store.db,
        now: () => store.clock.now(),
        notifier: store.notifier,
        logger,
        hostId: "host_failing",
        url: "http://failing.test",
        capacity: { cpu: 1, memoryBytes: 2 ** 30, gpus: 0 },
        leaseMs: LEASE_MS,
        heartbeatMs: 20,
        seatStates: () => [],
      });
      await registry.start();
      await store.close();
      const failures = () => lines.filter((line) => line.msg.startsWith("the cluster heartbeat failed")).length;
      await waitFor(() => failures() >= 2, "two failed heartbeats logged");
      await registry.stop();
      assert.ok(lines.some((line) => line.msg.startsWith("removing this host from the cluster failed")));
    });
  });
}
