/**
 * The server's Prometheus metrics (prom-client), in one registry. Domain modules record through the
 * typed instruments here; gauges that mirror live state (queued runs, replicas) read it from sources
 * registered at wiring time, so they are exact whenever they are scraped.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";

/** A live reading for a gauge: label values and the value. */
export interface GaugeReading {
  labels: Record<string, string>;
  value: number;
}

/** Every instrument of the server. */
export interface Metrics {
  registry: Registry;
  httpRequestDuration: Histogram<"operation_id" | "method" | "status">;
  runsStarted: Counter<"app" | "mode">;
  runsFinished: Counter<"app" | "mode" | "status">;
  runDuration: Histogram<"app" | "mode" | "status">;
  runQueueTime: Histogram<"app" | "mode">;
  webhookAttempts: Counter<"outcome">;
  webhookDeliveryLatency: Histogram<"outcome">;
  /** Sets where the `runplane_runs_queued` gauge reads its values from. */
  setQueuedRunsSource(source: () => GaugeReading[] | Promise<GaugeReading[]>): void;
  /** Sets where the `runplane_replicas` gauge reads its values from. */
  setReplicasSource(source: () => GaugeReading[] | Promise<GaugeReading[]>): void;
}

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const RUN_BUCKETS = [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 43200];

/** Creates the registry with default process metrics and every Runplane instrument. */
export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  let queuedSource: () => GaugeReading[] | Promise<GaugeReading[]> = () => [];
  let replicasSource: () => GaugeReading[] | Promise<GaugeReading[]> = () => [];
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
  return {
    registry,
    httpRequestDuration: new Histogram({
      name: "runplane_http_request_duration_seconds",
      help: "HTTP request duration by operation and status",
      labelNames: ["operation_id", "method", "status"],
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    }),
    runsStarted: new Counter({
      name: "runplane_runs_started_total",
      help: "Runs started, by app and mode",
      labelNames: ["app", "mode"],
      registers: [registry],
    }),
    runsFinished: new Counter({
      name: "runplane_runs_finished_total",
      help: "Runs finished, by app, mode and terminal status",
      labelNames: ["app", "mode", "status"],
      registers: [registry],
    }),
    runDuration: new Histogram({
      name: "runplane_run_duration_seconds",
      help: "Time a run's function ran",
      labelNames: ["app", "mode", "status"],
      buckets: RUN_BUCKETS,
      registers: [registry],
    }),
    runQueueTime: new Histogram({
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
  };
}
