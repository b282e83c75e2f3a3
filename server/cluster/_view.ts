/**
 * The cluster view: the live hosts and their seats, as one host caches it for routing (read often,
 * without a database round trip, and replaced whole when re-read).
 */
import type { HostRow } from "./_host_records.ts";
import type { SeatRow } from "./_seat_records.ts";

/** What a host offers replicas. */
export interface HostCapacity {
  cpu: number;
  memoryBytes: number;
  gpus: number;
}

/** One seat held by a live host, with where to reach it. */
export interface LiveSeat {
  projectId: string;
  appId: string;
  seat: number;
  hostId: string;
  /** The holding host's advertised base URL. */
  url: string;
  state: "starting" | "ready";
  /** Calls its replica takes at once. */
  slots: number;
  /** Calls in flight on it at its host's last report. */
  busy: number;
}

/** One live host. */
export interface ClusterHost {
  hostId: string;
  url: string;
  capacity: HostCapacity;
  /** Its last heartbeat (store clock). */
  seenAt: number;
}

/** The live hosts (by id) and the seats they hold (by project, app and seat). */
export interface ClusterView {
  hosts: ClusterHost[];
  seats: LiveSeat[];
}

/** The view of `hosts` and `seats` (both live rows): seats of a host not among `hosts` are left out. */
export function viewOf(hosts: HostRow[], seats: SeatRow[]): ClusterView {
  const urls = new Map(hosts.map((host) => [host.host_id, host.url]));
  return {
    hosts: hosts.map((host) => ({
      hostId: host.host_id,
      url: host.url,
      capacity: { cpu: host.cpu, memoryBytes: host.memory_bytes, gpus: host.gpus },
      seenAt: host.seen_at,
    })),
    seats: seats.flatMap((seat) => {
      const url = urls.get(seat.host_id);
      if (url === undefined) return [];
      return [{
        projectId: seat.project_id,
        appId: seat.app_id,
        seat: seat.seat,
        hostId: seat.host_id,
        url,
        state: seat.state,
        slots: seat.slots,
        busy: seat.busy,
      }];
    }),
  };
}

/** `view` with `seat` added (or put in place of the one with its key), in order. */
export function withSeat(view: ClusterView, seat: LiveSeat): ClusterView {
  const seats = withoutSeat(view, seat).seats.concat(seat);
  seats.sort((a, b) => compare(a.projectId, b.projectId) || compare(a.appId, b.appId) || a.seat - b.seat);
  return { hosts: view.hosts, seats };
}

/** `view` without the seat of `key`. */
export function withoutSeat(view: ClusterView, key: { projectId: string; appId: string; seat: number }): ClusterView {
  const seats = view.seats.filter((s) =>
    !(s.projectId === key.projectId && s.appId === key.appId && s.seat === key.seat)
  );
  return { hosts: view.hosts, seats };
}

/** What tells two views apart for their readers: everything but the hosts' heartbeat times. */
export function viewKey(view: ClusterView): string {
  return JSON.stringify([view.hosts.map((h) => [h.hostId, h.url, h.capacity]), view.seats]);
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
