/**
 * A counter and a histogram for the instruments every call records (requests, run starts and ends):
 * five of prom-client's label lookups cost ~3% of a sync call's CPU. prom-client finds a label set by
 * building a string of `name:value` pairs after checking every name, and a bucket by writing its bound
 * as a property name (a number-to-string conversion each time); these find the set by its values joined
 * in label order and count buckets by index. They join prom-client's registry with its `get()` format
 * (and the histogram its `getForPromString()`), so `/metrics`, the JSON the host's workers aggregate
 * and `reset()` read them as prom-client's own (test/metrics/per_call_test.ts compares the texts).
 */
import type { MetricValue, MetricValueWithName, Registry } from "prom-client";

/** A metric's values as prom-client's `get()` gives them (its own type also asks for a `collect`). */
export interface MetricReading<V> {
  name: string;
  help: string;
  type: "counter" | "histogram";
  aggregator: "sum";
  values: V[];
}

/** What both instruments are told. */
export interface PerCallMetricOptions<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
  registers: Registry[];
}

/** The key of a label set: its values in label order (label values never hold `\u0001`). */
function keyOf<L extends string>(labelNames: readonly L[], labels: Record<L, string>): string {
  let key = labels[labelNames[0]];
  for (let i = 1; i < labelNames.length; i++) key += "\u0001" + labels[labelNames[i]];
  return key;
}

/** The label set as given, copied (a caller may reuse its object). */
function copyOf<L extends string>(labelNames: readonly L[], labels: Record<L, string>): Record<L, string> {
  const copy = {} as Record<L, string>;
  for (const name of labelNames) copy[name] = labels[name];
  return copy;
}

/** What both instruments have: their name, help and label names, and their place in the registries. */
abstract class PerCallMetric<L extends string> {
  readonly name: string;
  readonly help: string;
  readonly aggregator = "sum" as const;
  protected readonly labelNames: readonly L[];

  constructor(options: PerCallMetricOptions<L>) {
    this.name = options.name;
    this.help = options.help;
    this.labelNames = options.labelNames;
    // The registry takes any metric with prom-client's `get()`; its type names prom-client's own classes.
    for (const registry of options.registers) registry.registerMetric(this as never);
  }
}

/** A monotonic counter over the label names `L`. */
export class PerCallCounter<L extends string> extends PerCallMetric<L> {
  readonly type = "counter" as const;
  #values = new Map<string, MetricValue<L>>();

  /** Adds `value` (default 1) to the label set's count. */
  inc(labels: Record<L, string>, value = 1): void {
    if (!(value >= 0) || !Number.isFinite(value)) throw new TypeError(`A counter only grows: ${value}`);
    const key = keyOf(this.labelNames, labels);
    const found = this.#values.get(key);
    if (found) found.value += value;
    else this.#values.set(key, { value, labels: copyOf(this.labelNames, labels) });
  }

  get(): Promise<MetricReading<MetricValue<L>>> {
    return Promise.resolve({
      name: this.name,
      help: this.help,
      type: this.type,
      aggregator: this.aggregator,
      values: [...this.#values.values()].map((v) => ({ value: v.value, labels: { ...v.labels } })),
    });
  }

  reset(): void {
    this.#values = new Map();
  }
}

/** One label set's observations: a count per bucket (not cumulative), their sum and count. */
interface Cell<L extends string> {
  labels: Record<L, string>;
  buckets: Float64Array;
  sum: number;
  count: number;
}

/** A histogram over the label names `L` with the upper bounds `buckets` (ascending). */
export class PerCallHistogram<L extends string> extends PerCallMetric<L> {
  readonly type = "histogram" as const;
  readonly #bounds: readonly number[];
  #cells = new Map<string, Cell<L>>();

  constructor(options: PerCallMetricOptions<L> & { buckets: readonly number[] }) {
    super(options);
    this.#bounds = [...options.buckets].sort((a, b) => a - b);
  }

  /** Counts `value` in the label set's bucket (the first whose bound is at least `value`) and sum. */
  observe(labels: Record<L, string>, value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    const key = keyOf(this.labelNames, labels);
    let cell = this.#cells.get(key);
    if (!cell) {
      cell = {
        labels: copyOf(this.labelNames, labels),
        buckets: new Float64Array(this.#bounds.length),
        sum: 0,
        count: 0,
      };
      this.#cells.set(key, cell);
    }
    const bounds = this.#bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]) i++;
    if (i < bounds.length) cell.buckets[i]++;
    cell.sum += value;
    cell.count++;
  }

  /** prom-client's histogram values: per label set, each cumulative bucket (`le`), `+Inf`, sum and count. */
  getForPromString(): Promise<MetricReading<MetricValueWithName<L>>> {
    const values: Array<MetricValueWithName<L> & { sharedLabels: Record<L, string> }> = [];
    const bucketName = `${this.name}_bucket`;
    for (const cell of this.#cells.values()) {
      let cumulative = 0;
      for (let i = 0; i < this.#bounds.length; i++) {
        cumulative += cell.buckets[i];
        values.push(shared({ le: this.#bounds[i] }, cumulative, { metricName: bucketName, labels: cell.labels }));
      }
      values.push(shared({ le: "+Inf" }, cell.count, { metricName: bucketName, labels: cell.labels }));
      values.push(shared({}, cell.sum, { metricName: `${this.name}_sum`, labels: cell.labels, total: true }));
      values.push(shared({}, cell.count, { metricName: `${this.name}_count`, labels: cell.labels, total: true }));
    }
    return Promise.resolve({
      name: this.name,
      help: this.help,
      type: this.type,
      aggregator: this.aggregator,
      values,
    });
  }

  /** As `getForPromString`, each value's labels holding its label set too (prom-client's `get()`). */
  async get(): Promise<MetricReading<MetricValueWithName<L>>> {
    const data = await this.getForPromString();
    const values = data.values.map((value) => {
      const { sharedLabels, labels, ...rest } = value as typeof value & { sharedLabels: Record<L, string> };
      return { ...rest, labels: { ...labels, ...sharedLabels } };
    });
    return { ...data, values };
  }

  reset(): void {
    this.#cells = new Map();
  }
}

/**
 * A value with its own labels (`le`) and the label set it belongs to, as prom-client's histogram makes
 * it: a bucket with a null exemplar (none is kept), a sum or count (`total`) with an undefined one.
 */
function shared<L extends string>(
  labels: Record<string, string | number>,
  value: number,
  of: { metricName: string; labels: Record<L, string>; total?: boolean },
): MetricValueWithName<L> & { sharedLabels: Record<L, string> } {
  return {
    labels: labels as never,
    sharedLabels: of.labels,
    value,
    metricName: of.metricName,
    exemplar: of.total ? undefined : null,
  } as MetricValueWithName<L> & { sharedLabels: Record<L, string> };
}
