/**
 * An app's replicas per host, as `getApp` shows them (`replicas.hosts`): from the cluster's cached view
 * on a cluster host, or this process's own replicas on one that is not part of a cluster.
 */
import type { ClusterView } from "./_view.ts";

/** One host's replicas of an app, as the API shows them. */
export interface AppHostReplicas {
  host_id: string;
  url: string | null;
  this_host: boolean;
  starting: number;
  ready: number;
  /** Calls in flight on them, summed. */
  busy: number;
  slots: number;
  /** GPUs the host has (its registered capacity). */
  host_gpus: number;
}

/** Which app, and which host is asking. */
export interface AppHostsRequest {
  projectId: string;
  appId: string;
  /** The answering host's id (its entry gets `this_host`). */
  hostId: string;
}

/** The hosts of `view` holding seats of the app, with their seats summed, ordered by URL. */
export function appHostsOf(view: ClusterView, request: AppHostsRequest): AppHostReplicas[] {
  const byHost = new Map<string, AppHostReplicas>();
  for (const seat of view.seats) {
    if (seat.projectId !== request.projectId || seat.appId !== request.appId) continue;
    const entry = byHost.get(seat.hostId) ?? {
      host_id: seat.hostId,
      url: seat.url,
      this_host: seat.hostId === request.hostId,
      starting: 0,
      ready: 0,
      busy: 0,
      slots: 0,
      host_gpus: view.hosts.find((host) => host.hostId === seat.hostId)?.capacity.gpus ?? 0,
    };
    if (seat.state === "ready") entry.ready++;
    else entry.starting++;
    entry.busy += seat.busy;
    entry.slots += seat.slots;
    byHost.set(seat.hostId, entry);
  }
  return [...byHost.values()].sort((a, b) => compare(a.url ?? "", b.url ?? "") || compare(a.host_id, b.host_id));
}

/** This process's replicas of an app, counted by itself (no cluster). */
export interface LocalReplicas {
  hostId: string;
  url: string | null;
  starting: number;
  ready: number;
  /** Calls in flight on them. */
  busy: number;
  /** Calls each replica takes at once. */
  replicaConcurrency: number;
  hostGpus: number;
}

/** The answering process alone, when it has replicas of the app; empty when it has none. */
export function localAppHosts(local: LocalReplicas): AppHostReplicas[] {
  const replicas = local.starting + local.ready;
  if (replicas === 0) return [];
  return [{
    host_id: local.hostId,
    url: local.url,
    this_host: true,
    starting: local.starting,
    ready: local.ready,
    busy: local.busy,
    slots: replicas * local.replicaConcurrency,
    host_gpus: local.hostGpus,
  }];
}

/** Seats of the view per app (`project/app`), host URL and state, and the calls in flight per app and host: the cluster's gauges. */
export function seatCounts(view: ClusterView): {
  seats: Array<{ app: string; host: string; state: "starting" | "ready"; count: number }>;
  calls: Array<{ app: string; host: string; count: number }>;
} {
  const seats = new Map<string, { app: string; host: string; state: "starting" | "ready"; count: number }>();
  const calls = new Map<string, { app: string; host: string; count: number }>();
  for (const seat of view.seats) {
    const app = `${seat.projectId}/${seat.appId}`;
    const seatKey = JSON.stringify([app, seat.url, seat.state]);
    const seatEntry = seats.get(seatKey) ?? { app, host: seat.url, state: seat.state, count: 0 };
    seatEntry.count++;
    seats.set(seatKey, seatEntry);
    const callKey = JSON.stringify([app, seat.url]);
    const callEntry = calls.get(callKey) ?? { app, host: seat.url, count: 0 };
    callEntry.count += seat.busy;
    calls.set(callKey, callEntry);
  }
  return { seats: [...seats.values()], calls: [...calls.values()] };
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
