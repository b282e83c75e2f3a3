/**
 * This process as a host of the cluster: its row in `hosts` (advertised URL, capacity), the replica
 * seats it holds (claimed with a guarded write, so an app's `max_replicas` holds across processes), and
 * a cached view of every live host and seat for routing. A heartbeat renews the host and its seats,
 * deletes those of hosts that stopped heartbeating for a lease, and re-reads the view; claims, releases
 * and changes of this host's seats are announced on the `runplane_cluster` wake-up, on which every
 * registry re-reads its view at once. The wake-up only shortens the wait: the heartbeat alone keeps the
 * view correct, a lease later.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { Database, Notifier } from "../store/mod.ts";
import { deleteHost, deleteStaleHosts, type HostRow, selectLiveHosts, upsertHost } from "./_host_records.ts";
import {
  claimSeat,
  deleteHostSeats,
  deleteStaleSeats,
  releaseSeat,
  renewSeats,
  type SeatKey,
  selectLiveSeats,
} from "./_seat_records.ts";
import { type ClusterView, type HostCapacity, viewKey, viewOf, withoutSeat, withSeat } from "./_view.ts";

export type { SeatKey } from "./_seat_records.ts";
export type { ClusterHost, ClusterView, HostCapacity, LiveSeat } from "./_view.ts";

/** One seat this host holds, as its replica stands now. */
export interface SeatState {
  projectId: string;
  appId: string;
  seat: number;
  state: "starting" | "ready";
  /** Calls in flight on its replica. */
  busy: number;
}

/** Options of `createClusterRegistry`. */
export interface ClusterRegistryOptions {
  db: Kysely<Database>;
  /** The store's clock (every lease time comes from it). */
  now(): number;
  notifier: Notifier;
  /** Heartbeat failures are logged at `warn` (give it `quietDuringOutages`'s logger). */
  logger: Logger;
  /** This process's id as a host (new at every start). */
  hostId: string;
  /** Its advertised base URL, where other hosts forward calls. */
  url: string;
  capacity: HostCapacity;
  /** A host silent this long loses its host row and its seats. */
  leaseMs: number;
  /** How often the host and its seats are renewed and the view re-read (default `leaseMs / 3`). */
  heartbeatMs?: number;
  /**
   * The seats this host holds now, with their replicas' state and calls in flight (called at each
   * heartbeat and publish). A seat claimed but not listed is not renewed: it expires a lease later.
   */
  seatStates(): SeatState[];
  /**
   * Called with seats listed by `seatStates` that this host no longer holds: another host took them
   * over after this one missed its lease, or they were deleted. Their replicas must stop.
   */
  onSeatsLost?(lost: SeatKey[]): void;
}

/** This process's part in the cluster. */
export interface ClusterRegistry {
  readonly hostId: string;
  /**
   * Registers the host, renews its seats, reads the first view, then starts the heartbeat and listens
   * for wake-ups. Rejects when that first write or read fails (nothing is left running then).
   */
  start(): Promise<void>;
  /**
   * Claims the lowest free seat of an app among `limit` (its `max_replicas`) for this host: one no host
   * holds, or one whose host missed its lease. Resolves with the seat, or null when all are held.
   * Rejects on a store error. The seat is in this host's view at once, and the others are woken.
   */
  claimSeat(request: { projectId: string; appId: string; limit: number; slots: number }): Promise<number | null>;
  /**
   * Gives a seat back (if this host still holds it). Rejects on a store error; a seat no longer listed
   * by `seatStates` then expires a lease later.
   */
  releaseSeat(seat: SeatKey): Promise<void>;
  /** The cached view (never a database round trip); replaced whole, so a caller may keep one. */
  view(): ClusterView;
  /** Re-reads the view now; rejects on a store error. */
  refresh(): Promise<void>;
  /**
   * Says that this host's seats changed (state, calls in flight): they are written and announced soon,
   * at most once per `PUBLISH_DELAY_MS`, with `seatStates()` as it is then.
   */
  changed(): void;
  /** Calls `listener` after each change of the view; returns the function that stops it. */
  onViewChange(listener: () => void): () => void;
  /** Stops the heartbeat and the listener, and deletes this host's row and seats (a failure is logged). */
  stop(): Promise<void>;
}

/** How long `changed()` waits to gather changes into one write and one wake-up. */
export const PUBLISH_DELAY_MS = 50;

const CHANNEL = "runplane_cluster";

/** The longest `start()` waits for the wake-up listener's connection. */
const LISTEN_WAIT_MS = 5_000;

/** Creates the registry; nothing is written before `start()`. */
export function createClusterRegistry(options: ClusterRegistryOptions): ClusterRegistry {
  const { db, logger, hostId } = options;
  const heartbeatMs = options.heartbeatMs ?? Math.max(1, Math.floor(options.leaseMs / 3));
  const startedAt = options.now();
  const view = createCachedView(options);
  const refresh = coalesced(view.read);
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let publishTimer: NodeJS.Timeout | undefined;
  let beating: Promise<void> = Promise.resolve();
  let unlisten: (() => void) | undefined;
  // This host's seat writes run one at a time, each with `seatStates()` as it is when it runs.
  let seatWrites: Promise<unknown> = Promise.resolve();

  function renewMine(): Promise<void> {
    const next = seatWrites.then(async () => {
      const lost = await renewSeats(db, { hostId, now: options.now(), seats: options.seatStates() });
      if (lost.length > 0) reportLost(options, lost);
    });
    seatWrites = next.catch(() => {});
    return next;
  }

  async function heartbeat(): Promise<void> {
    const now = options.now();
    await upsertHost(db, hostRow(options, { startedAt, now }));
    await renewMine();
    const seenBefore = now - options.leaseMs;
    const hosts = await deleteStaleHosts(db, { seenBefore });
    const seats = await deleteStaleSeats(db, { seenBefore });
    if (hosts + seats > 0) logger.info({ hosts, seats }, "forgot the hosts and replica seats of stopped hosts");
    await refresh();
  }

  function scheduleHeartbeat(): void {
    if (stopped) return;
    timer = setTimeout(() => {
      beating = heartbeat()
        .catch((error) => logger.warn({ err: error }, "the cluster heartbeat failed; the next one retries"))
        .finally(scheduleHeartbeat);
    }, heartbeatMs);
    timer.unref();
  }

  async function publish(): Promise<void> {
    await options.notifier.notify(CHANNEL).catch((error) =>
      logger.warn({ err: error }, "announcing a change of the cluster failed; other hosts see it at their heartbeat")
    );
  }

  function wakeRefresh(): void {
    if (stopped) return;
    refresh().catch((error) => {
      if (!stopped) logger.warn({ err: error }, "re-reading the cluster view failed; the heartbeat retries");
    });
  }

  return {
    hostId,
    async start() {
      await heartbeat();
      unlisten = options.notifier.listen(CHANNEL, wakeRefresh);
      // Wake-ups only shorten the wait, so a listening connection slow to come does not hold the start up.
      await Promise.race([options.notifier.listening(), delay(Math.min(heartbeatMs, LISTEN_WAIT_MS))]);
      scheduleHeartbeat();
    },
    async claimSeat(request) {
      if (stopped) throw new Error("The cluster registry is stopped: create a new one to claim seats");
      const now = options.now();
      const seat = await claimSeat(db, { ...request, hostId, now, staleBefore: now - options.leaseMs });
      if (seat === null) return null;
      const { projectId, appId, slots } = request;
      view.setLocal(
        withSeat(view.get(), { projectId, appId, seat, hostId, url: options.url, state: "starting", slots, busy: 0 }),
      );
      await publish();
      return seat;
    },
    async releaseSeat(seat) {
      await releaseSeat(db, { ...seat, hostId });
      view.setLocal(withoutSeat(view.get(), seat));
      await publish();
    },
    view: view.get,
    refresh,
    changed() {
      if (stopped || publishTimer) return;
      publishTimer = setTimeout(() => {
        publishTimer = undefined;
        renewMine().then(
          publish,
          (error) => logger.warn({ err: error }, "publishing this host's replica seats failed; the heartbeat retries"),
        );
      }, PUBLISH_DELAY_MS);
    },
    onViewChange: view.onChange,
    async stop() {
      if (stopped) return;
      stopped = true;
      clearTimeout(timer);
      clearTimeout(publishTimer);
      unlisten?.();
      await beating;
      await seatWrites;
      try {
        await deleteHostSeats(db, hostId);
        await deleteHost(db, hostId);
      } catch (error) {
        logger.warn({ err: error }, "removing this host from the cluster failed; its rows expire after the lease");
        return;
      }
      await publish();
    },
  };
}

/** This host's row, as of its heartbeat at `now`. */
function hostRow(options: ClusterRegistryOptions, times: { startedAt: number; now: number }): HostRow {
  const { cpu, memoryBytes, gpus } = options.capacity;
  return {
    host_id: options.hostId,
    url: options.url,
    cpu,
    memory_bytes: memoryBytes,
    gpus,
    started_at: times.startedAt,
    seen_at: times.now,
  };
}

/** Tells `onSeatsLost` of the seats in `lost` that `seatStates()` still lists (a seat released meanwhile is not lost). */
function reportLost(options: ClusterRegistryOptions, lost: SeatKey[]): void {
  const listed = new Set(options.seatStates().map(seatId));
  const still = lost.filter((seat) => listed.has(seatId(seat)));
  if (still.length === 0) return;
  options.logger.warn({ seats: still }, "this host lost replica seats to another host (it missed its lease)");
  try {
    options.onSeatsLost?.(still);
  } catch (error) {
    options.logger.error({ err: error }, "handling lost replica seats failed");
  }
}

/** The cached view, its readers' listeners, and the read that replaces it. */
function createCachedView(options: Pick<ClusterRegistryOptions, "db" | "now" | "leaseMs" | "logger">) {
  let current: ClusterView = { hosts: [], seats: [] };
  let currentKey = viewKey(current);
  const listeners = new Set<() => void>();
  /** Counts this host's own changes (a seat claimed or released), which a read begun before must not undo. */
  let localChanges = 0;

  function set(next: ClusterView): void {
    const key = viewKey(next);
    current = next;
    if (key === currentKey) return;
    currentKey = key;
    for (const listener of listeners) {
      try {
        listener();
      } catch (error) {
        options.logger.error({ err: error }, "a listener of the cluster view failed");
      }
    }
  }

  async function read(): Promise<void> {
    for (;;) {
      const before = localChanges;
      const seenSince = options.now() - options.leaseMs;
      const hosts = await selectLiveHosts(options.db, { seenSince });
      const seats = await selectLiveSeats(options.db, { seenSince });
      // This host claimed or released a seat while the rows were read, which may predate it: read again.
      if (localChanges === before) return set(viewOf(hosts, seats));
    }
  }

  return {
    get: (): ClusterView => current,
    /** Sets the view after this host's own change of its seats (written to the store first). */
    setLocal(next: ClusterView): void {
      localChanges++;
      set(next);
    },
    read,
    onChange(listener: () => void): () => void {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}

/**
 * `run`, called at most once at a time: a call while it runs queues one more run after it (shared by
 * every call meanwhile), so that each call is followed by a run that started after it.
 */
function coalesced(run: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  let queued: Promise<void> | undefined;
  function request(): Promise<void> {
    if (!running) {
      running = run().finally(() => (running = undefined));
      return running;
    }
    queued ??= running.catch(() => {}).then(() => {
      queued = undefined;
      return request();
    });
    return queued;
  }
  return request;
}

function seatId(seat: SeatKey): string {
  return `${seat.projectId}\n${seat.appId}\n${seat.seat}`;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
