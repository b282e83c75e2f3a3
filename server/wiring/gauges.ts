/** Where the live gauges of `/metrics` read from. */
import type { ClusterHost } from "../placement/mod.ts";
import { seatCounts } from "../cluster/mod.ts";
import type { Metrics } from "../metrics/mod.ts";
import type { RunService } from "../runs/mod.ts";
import type { Runtime } from "../runtime/mod.ts";

/** What `wireGauges` reads. */
export interface GaugeSources {
  runs: RunService;
  /** The replicas shown (a worker's are its supervisor's). */
  runtime: Runtime;
  /** On a host of a cluster: the cluster's view. */
  cluster?: ClusterHost;
}

/** Sets the gauges' sources (and where batches are counted): queued runs, this host's capacity and replicas, and (on a cluster host) the cluster's view. */
export function wireGauges(metrics: Metrics, sources: GaugeSources): void {
  const { runs, runtime, cluster } = sources;
  // Batches of batched functions are counted where their replica is (a worker's shown runtime has none).
  runtime.listenBatches?.((app, batch) => {
    const labels = { app, function: batch.fn };
    metrics.batchSize.observe(labels, batch.size);
    metrics.batchWait.observe(labels, batch.waitMs / 1000);
  });
  metrics.setQueuedRunsSource(async () =>
    (await runs.queuedByApp()).map((q) => ({ labels: { app: `${q.projectId}/${q.appId}` }, value: q.count }))
  );
  metrics.setCapacitySource(() => {
    const { total, reserved, gpus } = runtime.hostCapacity();
    return {
      waiting: runtime.waitingForCapacity().map(({ app, replicas }) => ({ labels: { app }, value: replicas })),
      host: [
        { labels: { resource: "cpu", kind: "total" }, value: total.cpu },
        { labels: { resource: "cpu", kind: "reserved" }, value: reserved.cpu },
        { labels: { resource: "memory_bytes", kind: "total" }, value: total.memoryBytes },
        { labels: { resource: "memory_bytes", kind: "reserved" }, value: reserved.memoryBytes },
        { labels: { resource: "gpus", kind: "total" }, value: gpus.total },
        { labels: { resource: "gpus", kind: "reserved" }, value: gpus.held },
      ],
    };
  });
  metrics.setReplicasSource(() =>
    runtime.replicaStates().flatMap(({ app, ...states }) =>
      Object.entries(states).map(([state, value]) => ({ labels: { app, state }, value }))
    )
  );
  if (cluster) {
    const { registry } = cluster;
    metrics.setClusterSource(() => {
      const { seats, calls } = seatCounts(registry.view());
      return {
        seats: seats.map(({ app, host, state, count }) => ({ labels: { app, host, state }, value: count })),
        calls: calls.map(({ app, host, count }) => ({ labels: { app, host }, value: count })),
      };
    });
  }
}
