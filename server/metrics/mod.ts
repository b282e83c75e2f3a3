/**
 * The server's Prometheus metrics (prom-client), in one registry. Domain modules record through the
 * typed instruments here; gauges that mirror live state (queued runs, replicas) read it from sources
 * registered at wiring time, so they are exact whenever they are scraped.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import { PerCallCounter, PerCallHistogram } from "./per_call.ts";

export { PerCallCounter, PerCallHistogram } from "./per_call.ts";

/** A live reading for a gauge: label values and the value. */
export interface GaugeReading {
  labels: Record<string, string>;
  value: number;
}

/** Every instrument of the server. */
export interface Metrics {
  registry: Registry;
  // Recorded on every call: the cheaper instruments of ./per_call.ts.
  httpRequestDuration: PerCallHistogram<"operation_id" | "method" | "status">;
  /** Calls a host's workers made on a replica's channel or handed to their supervisor. */
  workerCalls: PerCallCounter<"path">;
  runsStarted: PerCallCounter<"app" | "mode">;
  runsFinished: PerCallCounter<"app" | "mode" | "status">;
  runDuration: PerCallHistogram<"app" | "mode" | "status">;
  runQueueTime: PerCallHistogram<"app" | "mode">;
  webhookAttempts: Counter<"outcome">;
  webhookDeliveryLatency: Histogram<"outcome">;
  /** Sets where the `runplane_runs_queued` gauge reads its values from. */
  setQueuedRunsSource(source: () => GaugeReading[] | Promise<GaugeReading[]>): void;
  /** Sets where the `runplane_replicas` gauge reads its values from. */
  setReplicasSource(source: () => GaugeReading[] | Promise<GaugeReading[]>): void;
  /**
   * Sets where `runplane_replicas_waiting_for_capacity` (per app) and `runplane_host_capacity` (the host's
   * budget and what replicas reserve of it) read their values from.
   */
  setCapacitySource(source: () => CapacityReadings): void;
  /**
   * Sets where `runplane_cluster_seats` (replica seats per app, host and state) and
   * `runplane_cluster_calls_in_flight` (per app and host) read their values from: a cluster host's cached
   * view. Unset (no cluster), both are empty.
   */
  setClusterSource(source: () => ClusterReadings): void;
  /** The exposition `/metrics` answers: this registry's, or what `setExposition` gave (a host's, summed). */
  exposition(): Promise<string>;
  /** Sets where `exposition` comes from (a worker of a host: the supervisor sums every process's). */
  setExposition(source: () => Promise<string>): void;
}

/** Live readings of the cluster's view: seats per app, host and state, and calls in flight per app and host. */
export interface ClusterReadings {
  seats: GaugeReading[];
  calls: GaugeReading[];
}

/** Live readings of the host's capacity: who waits for it, and how much there is and is held. */
export interface CapacityReadings {
  waiting: GaugeReading[];
  host: GaugeReading[];
}

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const RUN_BUCKETS = [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 43200];

/** Creates the registry with default process metrics and every Runplane instrument. */
export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  let queuedSource: () => GaugeReading[] | Promise<GaugeReading[]> = () => [];
  let replicasSource: () => GaugeReading[] | Promise<GaugeReading[]> = () => [];
  let capacitySource: () => CapacityReadings = () => ({ waiting: [], host: [] });
  let clusterSource: () => ClusterReadings = () => ({ seats: [], calls: [] });
  let exposition = () => registry.metrics();
  function liveGauge(
    name: string,
    help: string,
    labelNames: string[],
    read: () => GaugeReading[] | Promise<GaugeReading[]>,
  ) {
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
  liveGauge("runplane_runs_queued", "Runs accepted and waiting to start, per app", ["app"], () => queuedSource());
  liveGauge(
    "runplane_replicas",
    "Worker replicas per app by state (starting, idle, busy)",
    ["app", "state"],
    () => replicasSource(),
  );
  liveGauge(
    "runplane_replicas_waiting_for_capacity",
    "Replicas an app would start now but the host's budget (RUNPLANE_HOST_CPU, RUNPLANE_HOST_MEMORY, free GPUs) has no room for; its calls wait",
    ["app"],
    () => capacitySource().waiting,
  );
  liveGauge(
    "runplane_host_capacity",
    "The host's budget for replicas (kind=total) and what live replicas reserve of it (kind=reserved), by resource (cpu cores, memory_bytes, gpus)",
    ["resource", "kind"],
    () => capacitySource().host,
  );
  liveGauge(
    "runplane_cluster_seats",
    "Replica seats of the cluster per app, host (its advertised URL) and state (starting, ready), as this host's cached view has them (up to a heartbeat old); only on a cluster host",
    ["app", "host", "state"],
    () => clusterSource().seats,
  );
  liveGauge(
    "runplane_cluster_calls_in_flight",
    "Calls in flight on each host's replicas of an app (host: its advertised URL), as this host's cached view has them (up to a heartbeat old); only on a cluster host",
    ["app", "host"],
    () => clusterSource().calls,
  );
  return {
    registry,
    httpRequestDuration: new PerCallHistogram({
      name: "runplane_http_request_duration_seconds",
      help: "HTTP request duration by operation and status",
      labelNames: ["operation_id", "method", "status"],
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    }),
    workerCalls: new PerCallCounter({
      name: "runplane_worker_calls_total",
      help:
        "Calls a host's workers (RUNPLANE_WORKERS > 1) made on a replica's channel themselves (path=direct) or handed to their supervisor (path=handed_over)",
      labelNames: ["path"],
      registers: [registry],
    }),
    runsStarted: new PerCallCounter({
      name: "runplane_runs_started_total",
      help: "Runs started, by app and mode",
      labelNames: ["app", "mode"],
      registers: [registry],
    }),
    runsFinished: new PerCallCounter({
      name: "runplane_runs_finished_total",
      help: "Runs finished, by app, mode and terminal status",
      labelNames: ["app", "mode", "status"],
      registers: [registry],
    }),
    runDuration: new PerCallHistogram({
      name: "runplane_run_duration_seconds",
      help: "Time a run's function ran",
      labelNames: ["app", "mode", "status"],
      buckets: RUN_BUCKETS,
      registers: [registry],
    }),
    runQueueTime: new PerCallHistogram({
      name: "runplane_run_queue_time_seconds",
      help: "Time between a run's acceptance and its start",
      labelNames: ["app", "mode"],
      buckets: RUN_BUCKETS,
      registers: [registry],
    }),
    webhookAttempts: new Counter({
      name: "runplane_webhook_attempts_total",
      help: "Webhook delivery attempts by outcome (delivered, retry, failed, refused)",
      labelNames: ["outcome"],
      registers: [registry],
    }),
    webhookDeliveryLatency: new Histogram({
      name: "runplane_webhook_delivery_latency_seconds",
      help: "Time from a run's end to its webhook's final outcome",
      labelNames: ["outcome"],
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    }),
    setQueuedRunsSource(source) {
      queuedSource = source;
    },
    setReplicasSource(source) {
      replicasSource = source;
    },
    setCapacitySource(source) {
      capacitySource = source;
    },
    setClusterSource(source) {
      clusterSource = source;
    },
    exposition: () => exposition(),
    setExposition(source) {
      exposition = source;
    },
  };
}
