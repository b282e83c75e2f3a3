/**
 * The per-call counter and histogram against prom-client's own: the same observations give the same
 * `/metrics` text, the same JSON (what a host's workers aggregate) and the same aggregate.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { AggregatorRegistry, Counter, Histogram, Registry } from "prom-client";
import { PerCallCounter, PerCallHistogram } from "../../server/metrics/mod.ts";

const BUCKETS = [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5];
const LABELS = ["app", "mode", "status"] as const;
type Label = (typeof LABELS)[number];

/** The same instruments twice: prom-client's in one registry, the per-call ones in the other. */
function pair() {
  const theirs = new Registry();
  const ours = new Registry();
  const options = { labelNames: LABELS, help: "h" };
  return {
    theirs,
    ours,
    counters: [
      new Counter({ ...options, labelNames: [...LABELS], name: "calls_total", registers: [theirs] }),
      new PerCallCounter({ ...options, name: "calls_total", registers: [ours] }),
    ] as const,
    histograms: [
      new Histogram({
        ...options,
        labelNames: [...LABELS],
        name: "call_seconds",
        buckets: BUCKETS,
        registers: [theirs],
      }),
      new PerCallHistogram({ ...options, name: "call_seconds", buckets: BUCKETS, registers: [ours] }),
    ] as const,
  };
}

/** Label sets with awkward values, and values on, between and past the bounds. */
function record(metrics: ReturnType<typeof pair>): void {
  const sets: Array<Record<Label, string>> = [
    { app: "p/a", mode: "sync", status: "success" },
    { app: "p/a", mode: "async", status: "failure" },
    { app: 'p/"quoted"\\', mode: "stream", status: "success" },
    { app: "p/b", mode: "sync", status: "" },
  ];
  const values = [0, 0.005, 0.0051, 0.01, 0.3, 1, 4.99, 5, 7, 1_000, 0.00001];
  let i = 0;
  for (const value of values) {
    for (const labels of sets) {
      for (const counter of metrics.counters) counter.inc({ ...labels }, (i % 3) + 1);
      for (const histogram of metrics.histograms) histogram.observe({ ...labels }, value);
      i++;
    }
  }
}

describe("per-call metrics", () => {
  it("expose the text and JSON prom-client's counter and histogram expose for the same observations", async () => {
    const metrics = pair();
    record(metrics);
    assert.equal(await metrics.ours.metrics(), await metrics.theirs.metrics());
    assert.deepEqual(await metrics.ours.getMetricsAsJSON(), await metrics.theirs.getMetricsAsJSON());
  });

  it("aggregate across processes as prom-client's do", async () => {
    const [a, b] = [pair(), pair()];
    record(a);
    record(b);
    b.counters[1].inc({ app: "p/only-b", mode: "sync", status: "success" });
    b.counters[0].inc({ app: "p/only-b", mode: "sync", status: "success" });
    const ours = AggregatorRegistry.aggregate([await a.ours.getMetricsAsJSON(), await b.ours.getMetricsAsJSON()]);
    const theirs = AggregatorRegistry.aggregate([
      await a.theirs.getMetricsAsJSON(),
      await b.theirs.getMetricsAsJSON(),
    ]);
    assert.equal(await ours.metrics(), await theirs.metrics());
  });

  it("keep a copy of each label set (a caller may reuse its object)", async () => {
    const counter = new PerCallCounter({ name: "c", help: "h", labelNames: ["app"], registers: [] });
    const labels = { app: "p/a" };
    counter.inc(labels);
    labels.app = "p/changed";
    assert.deepEqual((await counter.get()).values, [{ value: 1, labels: { app: "p/a" } }]);
  });

  it("start over on reset, and refuse what prom-client refuses", async () => {
    const metrics = pair();
    record(metrics);
    metrics.ours.resetMetrics();
    metrics.theirs.resetMetrics();
    assert.equal(await metrics.ours.metrics(), await metrics.theirs.metrics());
    const labels = { app: "p/a", mode: "sync", status: "success" };
    assert.throws(() => metrics.histograms[1].observe(labels, Number.NaN), TypeError);
    assert.throws(() => metrics.counters[1].inc(labels, -1), TypeError);
  });
});
