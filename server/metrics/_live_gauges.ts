/**
 * The gauges that mirror live state (queued runs, replicas, capacity, the cluster's view): each reads its
 * values, when it is scraped, from a source registered at wiring time, so it is exact whenever it is.
 */
import { Gauge, type Registry } from "prom-client";
import type { CapacityReadings, ClusterReadings, GaugeReading } from "./_types.ts";

/** Where the live gauges read their values from (set at wiring time; empty until then). */
export class LiveSources {
  queued: () => GaugeReading[] | Promise<GaugeReading[]> = () => [];
  replicas: () => GaugeReading[] | Promise<GaugeReading[]> = () => [];
  capacity: () => CapacityReadings = () => ({ waiting: [], host: [] });
  cluster: () => ClusterReadings = () => ({ seats: [], calls: [] });
}

/** One live gauge: its name, help, labels and what reads its values. */
interface LiveGauge {
  name: string;
  help: string;
  labelNames: string[];
  read: () => GaugeReading[] | Promise<GaugeReading[]>;
}

function liveGauge(registry: Registry, gauge: LiveGauge): Gauge {
  const { name, help, labelNames, read } = gauge;
  return new Gauge({
    name,
    help,
    labelNames,
    registers: [registry],
    // Live state of the host, which a worker of a host only mirrors from its supervisor: summing the
    // processes' readings would count it once per process (see server/host/host_metrics.ts).
    aggregator: "max",
    async collect() {
      this.reset();
      for (const reading of await read()) this.set(reading.labels, reading.value);
    },
  });
}

/** Registers every live gauge in `registry`, in this order, each reading from `sources`. */
export function registerLiveGauges(registry: Registry, sources: LiveSources): void {
  liveGauge(registry, {
    name: "runplane_runs_queued",
    help: "Runs accepted and waiting to start, per app",
    labelNames: ["app"],
    read: () => sources.queued(),
  });
  liveGauge(registry, {
    name: "runplane_replicas",
    help: "Worker replicas per app by state (starting, idle, busy)",
    labelNames: ["app", "state"],
    read: () => sources.replicas(),
  });
  liveGauge(registry, {
    name: "runplane_replicas_waiting_for_capacity",
    help:
      "Replicas an app would start now but the host's budget (RUNPLANE_HOST_CPU, RUNPLANE_HOST_MEMORY, free GPUs) has no room for; its calls wait",
    labelNames: ["app"],
    read: () => sources.capacity().waiting,
  });
  liveGauge(registry, {
    name: "runplane_host_capacity",
    help:
      "The host's budget for replicas (kind=total) and what live replicas reserve of it (kind=reserved), by resource (cpu cores, memory_bytes, gpus)",
    labelNames: ["resource", "kind"],
    read: () => sources.capacity().host,
  });
  liveGauge(registry, {
    name: "runplane_cluster_seats",
    help:
      "Replica seats of the cluster per app, host (its advertised URL) and state (starting, ready), as this host's cached view has them (up to a heartbeat old); only on a cluster host",
    labelNames: ["app", "host", "state"],
    read: () => sources.cluster().seats,
  });
  liveGauge(registry, {
    name: "runplane_cluster_calls_in_flight",
    help:
      "Calls in flight on each host's replicas of an app (host: its advertised URL), as this host's cached view has them (up to a heartbeat old); only on a cluster host",
    labelNames: ["app", "host"],
    read: () => sources.cluster().calls,
  });
}
