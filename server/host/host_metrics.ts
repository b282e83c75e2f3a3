/**
 * One `/metrics` per host with workers: whichever worker a scrape reaches asks the supervisor, which
 * gathers every process's registry (its own and each worker's, over node:cluster's IPC channel) and sums
 * them with prom-client's `AggregatorRegistry`. Counters and histograms add up (each process counts what it
 * served); gauges a worker only mirrors from the supervisor (replicas, capacity, queued runs) are marked
 * `max`, so the host's figure is not counted once per process.
 */
import cluster, { type Worker } from "node:cluster";
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue, type Registry } from "prom-client";

/** How long the supervisor waits for a worker's registry before it answers without it. */
const COLLECT_TIMEOUT_MS = 5_000;
/** How long a worker waits for the host's figures before its scrape fails. */
const ASK_TIMEOUT_MS = 9_000;

type Json = MetricObjectWithValues<MetricValue<string>>[];

/** The messages of this module, over the IPC channel. */
type MetricsMessage =
  | { runplane: "metrics-ask"; id: number }
  | { runplane: "metrics-collect"; id: number }
  | { runplane: "metrics-collected"; id: number; metrics: Json }
  | { runplane: "metrics-text"; id: number; text: string; error?: string };

function isMetricsMessage(message: unknown): message is MetricsMessage {
  const kind = (message as MetricsMessage | null)?.runplane;
  return kind === "metrics-ask" || kind === "metrics-collect" || kind === "metrics-collected"
    || kind === "metrics-text";
}

/**
 * In a worker: answers the supervisor's requests for this process's registry, and returns what asks the
 * supervisor for the host's exposition (rejects when it does not answer in time).
 */
export function workerMetrics(registry: Registry): { hostText(): Promise<string> } {
  let nextId = 0;
  const waiting = new Map<number, { resolve(text: string): void; reject(error: Error): void }>();
  process.on("message", (message: unknown) => {
    if (!isMetricsMessage(message)) return;
    if (message.runplane === "metrics-collect") {
      // A registry that cannot be read now (a gauge's source failed: the store away) adds nothing this time.
      void registry.getMetricsAsJSON().catch(() => []).then((metrics) => {
        const reply: MetricsMessage = { runplane: "metrics-collected", id: message.id, metrics: metrics as Json };
        if (process.connected) process.send?.(reply);
      });
    } else if (message.runplane === "metrics-text") {
      const asked = waiting.get(message.id);
      waiting.delete(message.id);
      if (message.error) asked?.reject(new Error(message.error));
      else asked?.resolve(message.text);
    }
  });
  return {
    hostText() {
      const id = nextId++;
      if (!process.connected) return Promise.reject(new Error("the supervisor is gone"));
      return new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiting.delete(id);
          reject(new Error("the supervisor did not answer with the host's metrics in time"));
        }, ASK_TIMEOUT_MS);
        waiting.set(id, {
          resolve(text) {
            clearTimeout(timer);
            resolve(text);
          },
          reject(error) {
            clearTimeout(timer);
            reject(error);
          },
        });
        const ask: MetricsMessage = { runplane: "metrics-ask", id };
        process.send?.(ask);
      });
    },
  };
}

/** Each live worker's registry, asked over IPC; a worker that does not answer in time is left out. */
function collectWorkers(workers: Worker[], id: number): Promise<Json[]> {
  return Promise.all(workers.map((worker) =>
    new Promise<Json | null>((resolve) => {
      const timer = setTimeout(() => done(null), COLLECT_TIMEOUT_MS);
      function done(metrics: Json | null): void {
        clearTimeout(timer);
        worker.off("message", onMessage);
        worker.off("exit", onExit);
        resolve(metrics);
      }
      function onMessage(message: unknown): void {
        if (isMetricsMessage(message) && message.runplane === "metrics-collected" && message.id === id) {
          done(message.metrics);
        }
      }
      const onExit = () => done(null);
      if (!worker.isConnected()) return done(null);
      worker.on("message", onMessage);
      worker.once("exit", onExit);
      const collect: MetricsMessage = { runplane: "metrics-collect", id };
      worker.send(collect);
    })
  )).then((all) => all.filter((metrics): metrics is Json => metrics !== null));
}

/**
 * In the supervisor: answers each worker's ask with the host's exposition, its own registry summed with
 * every live worker's. Returns what stops answering.
 */
export function serveHostMetrics(registry: Registry): () => void {
  let nextId = 0;
  async function hostText(): Promise<string> {
    const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => !!w && w.isConnected());
    const [own, theirs] = await Promise.all([registry.getMetricsAsJSON(), collectWorkers(workers, nextId++)]);
    return await AggregatorRegistry.aggregate([own, ...theirs]).metrics();
  }
  function onMessage(worker: Worker, message: unknown): void {
    if (!isMetricsMessage(message) || message.runplane !== "metrics-ask") return;
    hostText().then(
      (text) => ({ runplane: "metrics-text" as const, id: message.id, text }),
      (error: Error) => ({ runplane: "metrics-text" as const, id: message.id, text: "", error: error.message }),
    ).then((reply) => worker.isConnected() && worker.send(reply));
  }
  cluster.on("message", onMessage);
  return () => cluster.off("message", onMessage);
}
