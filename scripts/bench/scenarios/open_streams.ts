/**
 * 9. Open streams: many SSE calls held open at once, and readers that never read.
 *
 * The stream clients run in a child process of their own (this file, started with `client` as its
 * argument), so the event loop that timestamps the events is neither the server's nor the one sampling
 * memory. The stalled readers are raw sockets in this process: they send their request, take the first
 * chunk and then never read again, so the connection's TCP windows fill and the server must stop.
 * The server runs with its inspector on (`--inspect` on a free port) so that, once the stalled readers'
 * RSS is read, a full GC can be forced in it and its live heap read (this file again, as `heap`).
 */
import { execFile, fork } from "node:child_process";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { ROOT } from "../../_root.ts";
import { type BenchContext, row } from "../_context.ts";
import { cpuSeconds, descendantsOf, descendantsRssMiB, memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";

const SCENARIO = "9. Open streams";
/** Concurrent streams; `BENCH_OPEN_STREAMS` lowers it on a machine that cannot hold 1,000. */
const STREAMS = Number(process.env.BENCH_OPEN_STREAMS ?? 1000);
/** Each stream: an event every 100 ms for 10 s. */
const TICKS = { count: 100, every: 0.1 };
const STALLED = 100;
/** A stalled reader's generator: 64 KiB items as fast as it may, far more than any buffer holds. */
const FLOOD = { count: 1_000_000, every: 0, size: 65_536 };
/**
 * How long the stalled readers stay connected before their cost is read: at least `min`, then until the
 * flood has stopped (the workers idle over 2 s: the sockets' kernel buffers are full and the credits
 * spent), at most `max`. The 2-core VM that measured 8 s alone fills those buffers in 8–20 s, depending
 * on its hour: a fixed 8 s read a flood still running there (workers at ~100%) and its growth unfinished.
 */
const STALL_MS = { min: 8000, max: 30_000 };
const APPS = join(ROOT, "scripts", "bench", "stream_apps");
const THIS_FILE = fileURLToPath(import.meta.url);

/** What the stream clients' process reports when every stream has had its first event. */
interface OpenMessage {
  kind: "open";
  /** Wall-clock ms of the first stream's first event: the streams start ending 10 s later. */
  firstAt: number;
  /** Seconds from the process's start until every stream had its first event. */
  seconds: number;
}

/** What the stream clients' process answers to `pause` and `resume`. */
interface AckMessage {
  kind: "paused" | "resumed";
}

/** What the stream clients' process reports when every stream has ended. */
interface DoneMessage {
  kind: "done";
  events: number;
  failed: number;
  firstError: string;
  seconds: number;
  /** Delays of the events not in flight between `pause` and `resume`. */
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  noted: number;
  /** p99 of the events yielded once every stream was open (the opening burst left out). */
  steadyP99Ms: number;
}

/** The stream clients' process's arguments. */
interface ClientArguments {
  url: string;
  token: string;
  streams: number;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Wall-clock time in ms with sub-ms precision, comparable with Python's `time.time()`. */
function wallClockMs(): number {
  return performance.timeOrigin + performance.now();
}

function percentile(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : Number.NaN;
}

function median(values: number[]): number {
  return percentile([...values].sort((a, b) => a - b), 50);
}

/** Events' delays, noted while `noting` for the events yielded from `since` on. */
interface Delays {
  ms: number[];
  /** The delays of the events yielded from `steadyFrom` on (once every stream was open). */
  steady: number[];
  steadyFrom: number;
  noting: boolean;
  since: number;
}

/** Starts a call of the ticker app's generator (`every: 0` and `size` make it a flood). */
function callTicker(
  server: Pick<BenchServer, "url" | "token">,
  input: { count: number; every: number; size?: number },
): Promise<Response> {
  return fetch(`${server.url}/v4/${BENCH_PROJECT}/ticker/tick`, {
    method: "POST",
    headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(input),
  });
}

/**
 * Reads one stream to its end, noting each event's delay from the `t` it carries (the wall-clock time
 * of its `yield`) as `delays` says; calls `onFirst` at its first event. Returns the number of events.
 */
async function readStream(
  response: Response,
  options: { delays: Delays; onFirst?: () => void },
): Promise<number> {
  if (!response.ok) throw new Error(`the stream answered ${response.status}: ${await response.text()}`);
  const decoder = new TextDecoder();
  let buffered = "";
  let events = 0;
  for await (const chunk of response.body! as unknown as AsyncIterable<Uint8Array>) {
    const receivedAt = wallClockMs();
    buffered += decoder.decode(chunk, { stream: true });
    for (let end = buffered.indexOf("\n\n"); end >= 0; end = buffered.indexOf("\n\n")) {
      const data = buffered.slice(0, end).split("\n").find((line) => line.startsWith("data:"));
      buffered = buffered.slice(end + 2);
      // Heartbeats (`: ping`) carry no data.
      if (!data) continue;
      const { t } = JSON.parse(data.slice(5)) as { t: number };
      const delays = options.delays;
      if (delays.noting && t >= delays.since) {
        delays.ms.push(receivedAt - t);
        if (t >= delays.steadyFrom) delays.steady.push(receivedAt - t);
      }
      if (events++ === 0) options.onFirst?.();
    }
  }
  return events;
}

/**
 * The stream clients' process: opens `streams` streams at once, reports when all have had their first
 * event, leaves out the delays of the events in flight between `pause` and `resume` (the server's
 * forced GC must not count), and reports the delays once all streams have ended.
 */
async function clientMain(args: ClientArguments): Promise<void> {
  const delays: Delays = { ms: [], steady: [], steadyFrom: Infinity, noting: true, since: 0 };
  process.on("message", (message: { kind: string }) => {
    if (message.kind === "pause") delays.noting = false;
    // Events yielded before now were in flight during the pause.
    if (message.kind === "resume") Object.assign(delays, { noting: true, since: wallClockMs() });
    process.send!({ kind: message.kind === "pause" ? "paused" : "resumed" } satisfies AckMessage);
  });
  const started = performance.now();
  let opened = 0;
  let firstAt = 0;
  const onFirst = () => {
    if (opened++ === 0) firstAt = wallClockMs();
    if (opened === args.streams) {
      delays.steadyFrom = wallClockMs();
      process.send!({ kind: "open", firstAt, seconds: (performance.now() - started) / 1000 } satisfies OpenMessage);
    }
  };
  const results = await Promise.allSettled(
    Array.from({ length: args.streams }, async () => readStream(await callTicker(args, TICKS), { delays, onFirst })),
  );
  const seconds = (performance.now() - started) / 1000;
  const failures = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
  const sorted = delays.ms.sort((a, b) => a - b);
  const done: DoneMessage = {
    kind: "done",
    events: results.reduce((sum, r) => sum + (r.status === "fulfilled" ? r.value : 0), 0),
    failed: failures.length,
    firstError: failures.length ? String(failures[0].reason?.cause ?? failures[0].reason) : "",
    seconds,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    maxMs: sorted.at(-1) ?? Number.NaN,
    noted: sorted.length,
    steadyP99Ms: percentile(delays.steady.sort((a, b) => a - b), 99),
  };
  process.send!(done);
  process.disconnect();
}

/**
 * Runs this file in a process of its own as `mode` with `argument`; `report(kind)` is the first message
 * of that kind it sends (rejected if it exits first).
 */
function forkSelf(
  mode: "client" | "heap",
  options: { argument: string; execArgv?: string[] },
): { report<T>(kind: string): Promise<T>; send(message: { kind: string }): void; stop(): void } {
  const child = fork(THIS_FILE, [mode, options.argument], {
    cwd: ROOT,
    execArgv: [...(options.execArgv ?? []), "--import", "tsx"],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const exited = new Promise<never>((_, reject) =>
    child.once("exit", (code) => reject(new Error(`the ${mode} process exited with ${code}`)))
  );
  return {
    report<T>(kind: string) {
      const message = new Promise<T>((resolve) => {
        const listener = (m: { kind: string }) => {
          if (m.kind !== kind) return;
          child.off("message", listener);
          resolve(m as T);
        };
        child.on("message", listener);
      });
      const first = Promise.race([message, exited]);
      // A report may be awaited late (or raced against a deadline): its rejection is not unhandled.
      first.catch(() => undefined);
      return first;
    },
    send(message) {
      child.send(message);
    },
    stop() {
      // Its channel closing ends it (the `heap` process); a finished one has closed it already.
      if (child.connected) child.disconnect();
    },
  };
}

/** The stream clients' process: a promise of each of its reports; `around(task)` keeps the delays of the events in flight during `task` out. */
function startClients(
  server: BenchServer,
  streams: number,
): { open: Promise<OpenMessage>; done: Promise<DoneMessage>; around<T>(task: () => Promise<T>): Promise<T> } {
  const args: ClientArguments = { url: server.url, token: server.token, streams };
  const child = forkSelf("client", { argument: JSON.stringify(args) });
  const ask = (kind: "pause" | "resume") => {
    const acked = child.report<AckMessage>(kind === "pause" ? "paused" : "resumed");
    child.send({ kind });
    return acked;
  };
  return {
    open: child.report<OpenMessage>("open"),
    done: child.report<DoneMessage>("done"),
    async around(task) {
      await ask("pause");
      try {
        return await task();
      } finally {
        await ask("resume");
      }
    },
  };
}

/** The server's `process.memoryUsage()` after a full GC, in MiB, as the `heap` process reports it. */
interface HeapMessage {
  kind: "heap";
  rssMiB: number;
  heapUsedMiB: number;
  arrayBuffersMiB: number;
  /** Just before the forced GC: RSS, and what of it is V8's heap (committed and used). */
  before: { rssMiB: number; heapTotalMiB: number; heapUsedMiB: number };
}

/**
 * In a process of its own (Node 20 has `WebSocket` only with `--experimental-websocket`): connects to
 * the server's inspector, reports `ready`, then at each `gc` forces a full GC in the server and reports
 * its `process.memoryUsage()`; ends when its channel closes.
 */
async function heapMain(inspectorUrl: string): Promise<void> {
  const socket = new WebSocket(inspectorUrl);
  await new Promise((resolve, reject) => {
    socket.addEventListener("open", resolve);
    socket.addEventListener("error", reject);
  });
  const answers = new Map<number, (result: { result?: { value?: string } }) => void>();
  socket.addEventListener("message", (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result: { result?: { value?: string } } };
    if (message.id !== undefined) answers.get(message.id)?.(message.result);
  });
  const call = (method: string, params: object = {}) =>
    new Promise<{ result?: { value?: string } }>((resolve) => {
      const id = answers.size + 1;
      answers.set(id, resolve);
      socket.send(JSON.stringify({ id, method, params }));
    });
  const mib = (bytes: number) => bytes / 1048576;
  process.on("message", async (message: { kind: string }) => {
    if (message.kind !== "gc") return;
    const read = async () =>
      JSON.parse(
        (await call("Runtime.evaluate", { expression: "JSON.stringify(process.memoryUsage())" })).result!.value!,
      ) as NodeJS.MemoryUsage;
    const before = await read();
    await call("HeapProfiler.collectGarbage");
    const memory = await read();
    process.send!(
      {
        kind: "heap",
        rssMiB: mib(memory.rss),
        heapUsedMiB: mib(memory.heapUsed),
        arrayBuffersMiB: mib(memory.arrayBuffers),
        before: { rssMiB: mib(before.rss), heapTotalMiB: mib(before.heapTotal), heapUsedMiB: mib(before.heapUsed) },
      } satisfies HeapMessage,
    );
  });
  process.once("disconnect", () => socket.close());
  process.send!({ kind: "ready" });
}

/** Forces full GCs in the server and reads its memory then; `collect()` is null when it cannot. */
interface HeapProbe {
  collect(): Promise<HeapMessage | null>;
  stop(): void;
}

/**
 * Starts the `heap` process on the server's inspector. Without an inspector (or a `WebSocket`) the
 * probe answers null: the figures it adds are a diagnosis, not the target's measure.
 */
async function startHeapProbe(server: BenchServer): Promise<HeapProbe> {
  const absent: HeapProbe = { collect: () => Promise.resolve(null), stop() {} };
  const inspectorUrl = /Debugger listening on (ws:\/\/\S+)/.exec(server.output())?.[1];
  if (!inspectorUrl) return absent;
  const child = forkSelf("heap", { argument: inspectorUrl, execArgv: ["--no-warnings", "--experimental-websocket"] });
  if (!await child.report("ready").then(() => true, () => false)) return absent;
  return {
    collect() {
      const heap = child.report<HeapMessage>("heap");
      child.send({ kind: "gc" });
      return heap.catch(() => null);
    },
    stop: () => child.stop(),
  };
}

/**
 * The kernel memory of the server's established connections on `port` (`ss -tm`): what the server's
 * sockets hold unsent, and what the clients' sockets hold unread, in MiB.
 */
async function socketBuffersMiB(port: number): Promise<{ serverUnsent: number; clientUnread: number } | null> {
  const skmem = async (filter: string, field: "w" | "r") => {
    const { stdout } = await promisify(execFile)("ss", ["-tmnH", "state", "established", filter]);
    let bytes = 0;
    for (const match of stdout.matchAll(new RegExp(`skmem:\\([^)]*\\b${field}(\\d+)`, "g"))) bytes += Number(match[1]);
    return bytes / 1048576;
  };
  try {
    return {
      serverUnsent: await skmem(`( sport = :${port} )`, "w"),
      clientUnread: await skmem(`( dport = :${port} )`, "r"),
    };
  } catch {
    // No `ss` on this machine: the note leaves the kernel's share out.
    return null;
  }
}

/** What the stalled readers hold alive: the growth of the heap and array buffers after a full GC. */
function liveMemoryNote(baseline: HeapMessage, collected: HeapMessage): string {
  const heapMiB = collected.heapUsedMiB - baseline.heapUsedMiB;
  const buffersMiB = collected.arrayBuffersMiB - baseline.arrayBuffersMiB;
  return `live after a forced GC: heap +${heapMiB.toFixed(1)} MiB (${((heapMiB * 1024) / STALLED).toFixed(0)} KiB each)`
    + `, array buffers +${buffersMiB.toFixed(1)} MiB, RSS then ${collected.rssMiB.toFixed(0)} MiB`;
}

/**
 * A client that sends a flood call, takes the first chunk (to check the stream started) and then never
 * reads again: its receive window fills, then the server's send buffer, and the server must stop.
 */
function stalledReader(server: BenchServer): Promise<Socket> {
  const url = new URL(server.url);
  const body = JSON.stringify(FLOOD);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname, () => {
      socket.write(
        `POST /v4/${BENCH_PROJECT}/ticker/tick HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${server.token}\r\n`
          + `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
    });
    socket.once("data", (chunk: Buffer) => {
      socket.pause();
      const status = chunk.subarray(0, chunk.indexOf("\r\n")).toString();
      if (status.startsWith("HTTP/1.1 200")) return resolve(socket);
      socket.destroy();
      reject(new Error(`a stalled reader's call answered ${status}`));
    });
    socket.once("error", reject);
  });
}

/** A sample of the server's and its workers' memory and CPU. */
interface Sample {
  rssMiB: number;
  peakRssMiB: number;
  workersMiB: number;
  serverCpu: number;
  workersCpu: number;
}

/** Reads a `Sample` from /proc. */
async function sample(server: BenchServer): Promise<Sample> {
  const pid = server.child.pid!;
  const workers = await descendantsOf(pid);
  return {
    ...await memoryOf(pid),
    workersMiB: await descendantsRssMiB(pid),
    serverCpu: await cpuSeconds([pid]),
    workersCpu: await cpuSeconds(workers),
  };
}

/** Samples every 500 ms for `ms`. */
async function sampleFor(server: BenchServer, ms: number): Promise<Sample[]> {
  const samples: Sample[] = [];
  for (const end = performance.now() + ms; performance.now() < end;) {
    samples.push(await sample(server));
    await sleep(500);
  }
  return samples;
}

/** The scenario's server and the probe of its heap. */
interface Setup {
  server: BenchServer;
  probe: HeapProbe;
}

/** The first part: `STREAMS` streams at once, the server's memory while all are open. */
async function openStreams({ server, probe }: Setup, context: BenchContext): Promise<BenchRow> {
  // The idle baseline is a collected heap: left alone a while, V8 collects the start's garbage itself.
  const idleHeap = await probe.collect();
  const idle = await sample(server);
  context.log(`${SCENARIO}: ${STREAMS} streams`);
  const clients = startClients(server, STREAMS);
  // The streams last 10 s from their first event; all of them should be open well before that.
  const open = await Promise.race([clients.open, sleep(8000).then(() => null)]);
  // The plateau: every stream open, none ended yet (the first ends 10 s after its first event).
  const plateauMs = open ? Math.min(3000, open.firstAt + 8500 - wallClockMs()) : 1000;
  const plateau = await sampleFor(server, plateauMs);
  // What the open streams hold alive; the forced GC's pause is kept out of the delays.
  const liveHeap = open ? await clients.around(() => probe.collect()) : null;
  const done = await clients.done;
  const rssMiB = median(plateau.map((s) => s.rssMiB));
  const perStreamKiB = ((rssMiB - idle.rssMiB) * 1024) / STREAMS;
  const expected = STREAMS * TICKS.count;
  const complete = open !== null && done.failed === 0 && done.events === expected;
  return row({
    scenario: SCENARIO,
    subject: `${STREAMS.toLocaleString("en-US")} open streams, an event each 100 ms`,
    throughput: done.events / done.seconds,
    unit: "events/s",
    p50Ms: done.p50Ms,
    p99Ms: done.p99Ms,
    peakRssMiB: Math.max(...plateau.map((s) => s.peakRssMiB)),
    target: "< 50 KiB server memory per open stream",
    met: perStreamKiB < 50 && complete,
    note: [
      `server RSS ${idle.rssMiB.toFixed(0)} (idle, after a GC) → ${rssMiB.toFixed(0)} MiB with all open: ${
        perStreamKiB.toFixed(1)
      } KiB per stream`,
      ...(idleHeap && liveHeap
        ? [
          `live heap after a forced GC: ${
            (((liveHeap.heapUsedMiB - idleHeap.heapUsedMiB) * 1024) / STREAMS).toFixed(1)
          } KiB per stream`,
          `just before it, RSS ${liveHeap.before.rssMiB.toFixed(0)} MiB of which V8's heap ${
            liveHeap.before.heapTotalMiB.toFixed(0)
          } MiB (${liveHeap.before.heapUsedMiB.toFixed(0)} in use; idle after a GC: RSS ${
            idleHeap.rssMiB.toFixed(0)
          }, heap ${idleHeap.before.heapTotalMiB.toFixed(0)} before its GC)`,
        ]
        : []),
      `Python workers ${idle.workersMiB.toFixed(0)} → ${median(plateau.map((s) => s.workersMiB)).toFixed(0)} MiB`,
      `${done.events} of ${expected} events; delays yield → client of ${done.noted} (those in flight during the GC left out), p99 ${
        done.steadyP99Ms.toFixed(0)
      } ms once all were open, max ${done.maxMs.toFixed(0)} ms`,
      open ? `all open ${open.seconds.toFixed(1)} s after the clients started` : "not all streams were open within 8 s",
      ...(done.failed ? [`${done.failed} streams failed (${done.firstError})`] : []),
    ].join("; "),
  });
}

/** The share of a core the workers and the server used between two samples taken 2 s apart. */
function busyBetween(early: Sample, late: Sample): { workersBusy: number; serverBusy: number } {
  return { workersBusy: (late.workersCpu - early.workersCpu) / 2, serverBusy: (late.serverCpu - early.serverCpu) / 2 };
}

/**
 * Waits for the stalled readers' flood to stop (see `STALL_MS`): backpressure holds when the workers are
 * (nearly) idle over 2 s. Returns the last two samples, 2 s apart, and how long the readers have stalled.
 */
async function floodStopped(server: BenchServer): Promise<{ early: Sample; late: Sample; stalledMs: number }> {
  const started = performance.now();
  await sleep(STALL_MS.min - 2000);
  let early = await sample(server);
  for (;;) {
    await sleep(2000);
    const late = await sample(server);
    const stalledMs = performance.now() - started;
    if (busyBetween(early, late).workersBusy < 0.05 || stalledMs >= STALL_MS.max) return { early, late, stalledMs };
    early = late;
  }
}

/** The second part: `STALLED` readers that never read a flood; what they cost the server in all. */
async function stalledReaders({ server, probe }: Setup, context: BenchContext): Promise<BenchRow> {
  context.log(`${SCENARIO}: ${STALLED} stalled readers`);
  // The open streams' garbage is collected first: what follows is the stalled readers' alone.
  const baseline = await probe.collect();
  const before = await sample(server);
  const sockets: Socket[] = [];
  try {
    const started = await Promise.allSettled(Array.from({ length: STALLED }, () => stalledReader(server)));
    for (const result of started) if (result.status === "fulfilled") sockets.push(result.value);
    const refused = started.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (refused) {
      throw new Error(`${STALLED - sockets.length} stalled readers did not start`, { cause: refused.reason });
    }
    const { early, late, stalledMs } = await floodStopped(server);
    const kernel = await socketBuffersMiB(Number(new URL(server.url).port));
    // Last: the forced GC shrinks the heap the RSS figures above include.
    const collected = await probe.collect();
    const grownMiB = late.rssMiB - before.rssMiB;
    const { workersBusy, serverBusy } = busyBetween(early, late);
    return row({
      scenario: SCENARIO,
      subject: `${STALLED} stalled readers of 64 KiB items`,
      peakRssMiB: late.peakRssMiB,
      target: "< 100 MiB in all",
      met: grownMiB < 100 && workersBusy < 0.05,
      note: [
        `server RSS ${before.rssMiB.toFixed(0)} → ${late.rssMiB.toFixed(0)} MiB after ${
          (stalledMs / 1000).toFixed(0)
        } s (+${grownMiB.toFixed(1)} MiB, ${((grownMiB * 1024) / STALLED).toFixed(0)} KiB each; +${
          (early.rssMiB - before.rssMiB).toFixed(1)
        } MiB 2 s earlier)`,
        `CPU in the last 2 s: workers ${(workersBusy * 100).toFixed(0)}%, server ${
          (serverBusy * 100).toFixed(0)
        }% of a core`,
        ...(collected && baseline ? [liveMemoryNote(baseline, collected)] : []),
        `Python workers ${late.workersMiB.toFixed(0)} MiB`,
        ...(kernel
          ? [
            `kernel socket buffers: ${kernel.serverUnsent.toFixed(0)} MiB unsent, ${
              kernel.clientUnread.toFixed(0)
            } MiB unread`,
          ]
          : []),
      ].join("; "),
    });
  } finally {
    for (const socket of sockets) socket.destroy();
  }
}

/**
 * 9. Open streams: `STREAMS` (1,000) concurrent SSE calls to a generator yielding every 100 ms for 10 s
 * (server RSS per open stream, event latency from `yield` to the client), then 100 readers that never
 * read a generator yielding 64 KiB items as fast as it may (what they cost the server in all: the
 * backpressure must hold). Starts a server of its own with the ticker app (scripts/bench/stream_apps).
 */
export async function openStreamsScenario(context: BenchContext): Promise<BenchRow[]> {
  const inspect = `${process.env.NODE_OPTIONS ?? ""} --inspect=127.0.0.1:0`.trim();
  const server = await startRunplane({ NODE_OPTIONS: inspect }, { appsDir: APPS });
  const probe = await startHeapProbe(server);
  try {
    // The replicas start with the server (min_replicas); a short stream warms the path.
    await readStream(await callTicker(server, { count: 5, every: 0.01 }), {
      delays: { ms: [], steady: [], steadyFrom: Infinity, noting: false, since: 0 },
    });
    await sleep(1000);
    const open = await openStreams({ server, probe }, context);
    await sleep(1000);
    const stalled = await stalledReaders({ server, probe }, context);
    return [open, stalled];
  } finally {
    probe.stop();
    await server.stop();
  }
}

if (process.argv[1] === THIS_FILE && process.argv[2] === "client") {
  await clientMain(JSON.parse(process.argv[3]) as ClientArguments);
} else if (process.argv[1] === THIS_FILE && process.argv[2] === "heap") {
  await heapMain(process.argv[3]);
}
