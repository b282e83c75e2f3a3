import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { ROOT } from "../../generate.ts";
import { type BenchContext, row } from "../_context.ts";
import { descendantsRssMiB, memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";

const SCENARIO = "9. Open streams";
const STREAMS = Number(process.env.BENCH_OPEN_STREAMS ?? 1000);
const STALLED = 100;
const APPS = join(ROOT, "scripts", "bench", "stream_apps");

function percentile(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : Number.NaN;
}

/** Reads one stream to its end, noting each event's delay from its `t` (the time it was yielded). */
async function readStream(server: BenchServer, delays: number[]): Promise<number> {
  const response = await fetch(`${server.url}/v4/${BENCH_PROJECT}/ticker/tick`, {
    method: "POST",
    headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ count: 100, every: 0.1 }),
  });
  if (!response.ok) throw new Error(`stream answered ${response.status}`);
  const decoder = new TextDecoder();
  let buffered = "";
  let events = 0;
  for await (const chunk of response.body! as unknown as AsyncIterable<Uint8Array>) {
    buffered += decoder.decode(chunk, { stream: true });
    let end = buffered.indexOf("\n\n");
    while (end >= 0) {
      const data = buffered.slice(0, end).split("\n").find((line) => line.startsWith("data:"));
      buffered = buffered.slice(end + 2);
      end = buffered.indexOf("\n\n");
      const t = data ? (JSON.parse(data.slice(5)) as { t?: number }).t : undefined;
      if (t !== undefined) {
        delays.push(Date.now() - t);
        events++;
      }
    }
  }
  return events;
}

/** A client that sends a stream call and then never reads: its socket's window fills and stays full. */
function stalledReader(server: BenchServer): Promise<Socket> {
  const url = new URL(server.url);
  const body = JSON.stringify({ count: 100_000, every: 0, size: 65_536 });
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname, () => {
      socket.write(
        `POST /v4/${BENCH_PROJECT}/ticker/tick HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${server.token}\r\n`
          + `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      socket.pause();
      resolve(socket);
    });
    socket.on("error", reject);
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * 9. Open streams: 1,000 concurrent SSE calls to a generator yielding every 100 ms for 10 s (server RSS
 * per open stream, event latency), then 100 readers that never read a generator yielding 64 KiB items
 * as fast as it may (what they cost in all: the backpressure must hold).
 */
export async function openStreamsScenario(context: BenchContext): Promise<BenchRow[]> {
  const server = await startRunplane({}, { appsDir: APPS });
  try {
    // The replicas start with the server (min_replicas); one short stream makes the path warm.
    await readStream(server, []);
    await sleep(1000);
    const idle = await memoryOf(server.child.pid!);
    const workersIdle = await descendantsRssMiB(server.child.pid!);
    context.log(`${SCENARIO}: ${STREAMS} streams`);
    const delays: number[] = [];
    const started = performance.now();
    const streams = Array.from({ length: STREAMS }, () => readStream(server, delays));
    // Every stream is open (they run 10 s): the plateau.
    await sleep(6000);
    const open = await memoryOf(server.child.pid!);
    const workersOpen = await descendantsRssMiB(server.child.pid!);
    const events = (await Promise.allSettled(streams)).reduce(
      (sum, r) => sum + (r.status === "fulfilled" ? r.value : 0),
      0,
    );
    const seconds = (performance.now() - started) / 1000;
    const failed = (await Promise.allSettled(streams)).filter((r) => r.status === "rejected").length;
    delays.sort((a, b) => a - b);
    const perStreamKiB = ((open.rssMiB - idle.rssMiB) * 1024) / STREAMS;

    context.log(`${SCENARIO}: ${STALLED} stalled readers`);
    await sleep(1000);
    const beforeStalled = await memoryOf(server.child.pid!);
    const sockets = await Promise.all(Array.from({ length: STALLED }, () => stalledReader(server)));
    await sleep(8000);
    const stalled = await memoryOf(server.child.pid!);
    const workersStalled = await descendantsRssMiB(server.child.pid!);
    for (const socket of sockets) socket.destroy();
    const stalledMiB = stalled.rssMiB - beforeStalled.rssMiB;
    return [
      row({
        scenario: SCENARIO,
        subject: `${STREAMS.toLocaleString("en-US")} open streams, an event each 100 ms`,
        throughput: events / seconds,
        unit: "events/s",
        p50Ms: percentile(delays, 50),
        p99Ms: percentile(delays, 99),
        peakRssMiB: open.peakRssMiB,
        target: "< 50 KiB server memory per open stream",
        met: perStreamKiB < 50 && failed === 0 && events === STREAMS * 100,
        note: `server RSS ${Math.round(idle.rssMiB)} → ${Math.round(open.rssMiB)} MiB: ${
          perStreamKiB.toFixed(1)
        } KiB per stream; Python workers ${Math.round(workersIdle)} → ${Math.round(workersOpen)} MiB; ${events} of ${
          STREAMS * 100
        } events${failed ? `, ${failed} streams failed` : ""}`,
      }),
      row({
        scenario: SCENARIO,
        subject: `${STALLED} stalled readers of 64 KiB items`,
        peakRssMiB: stalled.peakRssMiB,
        target: "< 100 MiB in all",
        met: stalledMiB < 100,
        note: `server RSS ${Math.round(beforeStalled.rssMiB)} → ${Math.round(stalled.rssMiB)} MiB (${
          stalledMiB.toFixed(1)
        } MiB, ${((stalledMiB * 1024) / STALLED).toFixed(0)} KiB each) after 8 s; Python workers ${
          Math.round(workersStalled)
        } MiB`,
      }),
    ];
  } finally {
    await server.stop();
  }
}
