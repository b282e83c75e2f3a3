/** The instruments domain modules record through (see mod.ts), registered in one registry. */
import { Counter, Histogram, type Registry } from "prom-client";
import type { Metrics } from "./_types.ts";
import { PerCallCounter, PerCallHistogram } from "./per_call.ts";

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
const RUN_BUCKETS = [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 43200];

/** The recording instruments of `Metrics`. */
export type Instruments = Pick<
  Metrics,
  | "httpRequestDuration"
  | "workerCalls"
  | "runsStarted"
  | "runsFinished"
  | "runDuration"
  | "runQueueTime"
  | "webhookAttempts"
  | "webhookDeliveryLatency"
  | "batchSize"
  | "batchWait"
>;

/** Creates every recording instrument in `registry`, in this order. */
export function createInstruments(registry: Registry): Instruments {
  return {
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
    batchSize: new PerCallHistogram({
      name: "runplane_batch_size",
      help: "Calls per batch of a batched function ([functions.<name>] batch), by app and function",
      labelNames: ["app", "function"],
      buckets: BATCH_SIZE_BUCKETS,
      registers: [registry],
    }),
    batchWait: new PerCallHistogram({
      name: "runplane_batch_wait_seconds",
      help: "Time from a batch's first call reaching its replica to the batch's start, by app and function",
      labelNames: ["app", "function"],
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    }),
  };
}
