import { type BenchContext, row } from "../_context.ts";
import { memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT } from "../_runplane.ts";

const ITEMS = 100_000;

/** Reads an SSE response to its end; returns the number of events and the seconds it took. */
async function countEvents(response: Response, startedAt: number): Promise<{ events: number; seconds: number }> {
  const decoder = new TextDecoder();
  let events = 0;
  let previous = "";
  for await (const chunk of response.body! as unknown as AsyncIterable<Uint8Array>) {
    const text = previous + decoder.decode(chunk, { stream: true });
    let index = text.indexOf("\n\n");
    while (index >= 0) {
      events++;
      index = text.indexOf("\n\n", index + 2);
    }
    previous = text.endsWith("\n") ? "\n" : "";
  }
  return { events, seconds: (performance.now() - startedAt) / 1000 };
}

/** Reads the first event of a response and returns its data. */
async function firstEvent(response: Response): Promise<string> {
  const decoder = new TextDecoder();
  let text = "";
  const reader = response.body!.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    const end = text.indexOf("\n\n");
    if (end >= 0) {
      await reader.cancel();
      return text.slice(0, end).split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join(
        "\n",
      );
    }
  }
  throw new Error("The stream ended before its first event");
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** 3. A generator yielding 100,000 small items through the proxy, and first-event latency. */
export async function streamingScenario(context: BenchContext): Promise<BenchRow[]> {
  const scenario = "3. Streaming";
  const { runplane, bareKoa } = context;
  const headers = { Authorization: `Bearer ${runplane.token}`, "Content-Type": "application/json" };

  context.log("streaming: bare Koa");
  let started = performance.now();
  const koa = await countEvents(await fetch(`${bareKoa.url}/stream?n=${ITEMS}`), started);

  context.log("streaming: runplane 100,000 items");
  // One warm-up call starts the replica.
  await countEvents(
    await fetch(`${runplane.url}/v4/${BENCH_PROJECT}/stream/run`, {
      method: "POST",
      headers,
      body: JSON.stringify({ n: 10 }),
    }),
    0,
  );
  started = performance.now();
  const response = await fetch(`${runplane.url}/v4/${BENCH_PROJECT}/stream/run`, {
    method: "POST",
    headers,
    body: JSON.stringify({ n: ITEMS }),
  });
  const ours = await countEvents(response, started);

  context.log("streaming: first-event latency");
  const latencies: number[] = [];
  for (let i = 0; i < 10; i++) {
    const first = await fetch(`${runplane.url}/v4/${BENCH_PROJECT}/stream/first`, {
      method: "POST",
      headers,
      body: JSON.stringify({ count: 2, pause: 0.05 }),
    });
    const data = JSON.parse(await firstEvent(first)) as { yielded_at_ms: number };
    latencies.push(Date.now() - data.yielded_at_ms);
  }
  const koaRate = koa.events / koa.seconds;
  const rate = ours.events / ours.seconds;
  const p50 = median(latencies);
  return [
    row({
      scenario,
      subject: "bare Koa SSE loop (baseline)",
      throughput: koaRate,
      unit: "events/s",
      note: `${koa.events} events`,
    }),
    row({
      scenario,
      subject: "runplane events",
      throughput: rate,
      unit: "events/s",
      peakRssMiB: (await memoryOf(runplane.child.pid!)).peakRssMiB,
      ratio: rate / koaRate,
      target: "≥ 100,000 events/s",
      met: rate >= 100_000 && ours.events === ITEMS,
      note: `${ours.events} of ${ITEMS} events`,
    }),
    row({
      scenario,
      subject: "runplane first event",
      p50Ms: p50,
      p99Ms: Math.max(...latencies),
      target: "first event ≤ 5 ms after its yield",
      met: p50 <= 5,
      note: "p50/max over 10 calls, yield → client receipt (wall clock)",
    }),
  ];
}
