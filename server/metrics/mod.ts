/**
 * The server's Prometheus metrics (prom-client), in one registry. Domain modules record through the
 * typed instruments here; gauges that mirror live state (queued runs, replicas) read it from sources
 * registered at wiring time, so they are exact whenever they are scraped.
 */
import { collectDefaultMetrics, Registry } from "prom-client";
import { createInstruments } from "./_instruments.ts";
import { LiveSources, registerLiveGauges } from "./_live_gauges.ts";
import type { Metrics } from "./_types.ts";

export type { CapacityReadings, ClusterReadings, GaugeReading, Metrics } from "./_types.ts";
export { PerCallCounter, PerCallHistogram } from "./per_call.ts";

/** Creates the registry with default process metrics and every Runplane instrument. */
export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const sources = new LiveSources();
  let exposition = () => registry.metrics();
  registerLiveGauges(registry, sources);
  return {
    registry,
    ...createInstruments(registry),
    setQueuedRunsSource(source) {
      sources.queued = source;
    },
    setReplicasSource(source) {
      sources.replicas = source;
    },
    setCapacitySource(source) {
      sources.capacity = source;
    },
    setClusterSource(source) {
      sources.cluster = source;
    },
    exposition: () => exposition(),
    setExposition(source) {
      exposition = source;
    },
  };
}
