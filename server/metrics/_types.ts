/** The metrics' public types (re-exported by mod.ts). */
import type { Counter, Histogram, Registry } from "prom-client";
import type { PerCallCounter, PerCallHistogram } from "./per_call.ts";

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
  /** Calls per batch of a batched function (recorded where the replica is). */
  batchSize: PerCallHistogram<"app" | "function">;
  /** How long a batch waited for calls before it started, in seconds. */
  batchWait: PerCallHistogram<"app" | "function">;
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
