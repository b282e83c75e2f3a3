/**
 * 20. WebSocket runs to a custom runtime (issue 47), on servers of their own (`RUNPLANE_WORKERS=1`, so the
 * server is one process) serving scripts/bench/ws_apps: `ws-echo`, a standard-library Python echo server
 * with one replica of `replica_concurrency = 1000` (each open WebSocket holds a slot).
 * - memory: the server process's RSS with `BENCH_WS_CONNECTIONS` (default 1,000) idle connections open
 *   through it, minus its RSS before, per connection; each round on a fresh server, after a warm-up;
 * - round trip: a small text message echoed one at a time, through Runplane and straight to the replica's
 *   relay socket (the only way into its jail; Runplane's own side connects there too), alternating rounds;
 * - messages per second with echoes kept in flight on one connection and on 100, each path alternately.
 */
import { loadavg } from "node:os";
import { join } from "node:path";
import type WebSocket from "ws";
import { ROOT } from "../../_root.ts";
import { type BenchContext, row } from "../_context.ts";
import { descendantsRssMiB, memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";
import { percentile } from "../_sample.ts";
import {
  closeAll,
  echoRate,
  openMany,
  openWebSocket,
  relaySocketOf,
  roundTrips,
  type WebSocketTarget,
} from "../_websockets.ts";
import { median } from "./sandbox_cost.ts";

const SCENARIO = "20. WebSockets";
/** Idle connections held open for the memory figure; `BENCH_WS_CONNECTIONS` lowers it on a smaller machine. */
const CONNECTIONS = Number(process.env.BENCH_WS_CONNECTIONS ?? 1000);
const MEMORY_ROUNDS = 5;
const LATENCY_ROUNDS = 10;
const MESSAGES_PER_ROUND = 500;
const RATE_ROUNDS = 5;
const RATE_SECONDS = 3;
/** Echoes kept in flight on each connection while messages per second are counted. */
const WINDOW = 16;
/** The small text message: 32 bytes. */
const TEXT = "x".repeat(32);
const APPS = join(ROOT, "scripts", "bench", "ws_apps");

function startServer(): Promise<BenchServer> {
  return startRunplane({ RUNPLANE_WS_MAX_PER_PROJECT: String(CONNECTIONS + 1000) }, { appsDir: APPS });
}

function through(server: BenchServer): WebSocketTarget {
  return { kind: "runplane", server, project: BENCH_PROJECT, app: "ws-echo" };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function load(): string {
  return loadavg()[0].toFixed(1);
}

/** One memory round on a fresh server: KiB per open connection, and what the round saw. */
async function memoryRound(log: (m: string) => void) {
  const server = await startServer();
  try {
    const pid = server.child.pid!;
    // Warm-up: the upgrade path, the bridge and the replica are used before the baseline is read.
    const warm = await openMany(through(server), { count: 20 });
    if (warm.stoppedBy) throw new Error(`warm-up connection failed: ${warm.stoppedBy}`);
    for (const socket of warm.sockets) await roundTrips(socket, { count: 5, text: TEXT });
    await closeAll(warm.sockets);
    await sleep(2000);
    const before = (await memoryOf(pid)).rssMiB;
    const replicasBefore = await descendantsRssMiB(pid);
    const opened = await openMany(through(server), { count: CONNECTIONS });
    log(`websocket: ${opened.sockets.length} connections open${opened.stoppedBy ? ` (${opened.stoppedBy})` : ""}`);
    await sleep(3000);
    const after = (await memoryOf(pid)).rssMiB;
    const replicasAfter = await descendantsRssMiB(pid);
    const open = opened.sockets.filter((socket) => socket.readyState === socket.OPEN).length;
    await closeAll(opened.sockets);
    return {
      kib: ((after - before) * 1024) / Math.max(1, open),
      before,
      after,
      open,
      stoppedBy: opened.stoppedBy,
      replicasMiB: replicasAfter - replicasBefore,
    };
  } finally {
    await server.stop();
  }
}

async function memoryRows(log: (m: string) => void): Promise<BenchRow[]> {
  const rounds = [];
  const loads = [load()];
  for (let round = 0; round < MEMORY_ROUNDS; round++) {
    log(`websocket: memory, round ${round + 1} of ${MEMORY_ROUNDS} (${CONNECTIONS} connections, a fresh server)`);
    rounds.push(await memoryRound(log));
  }
  loads.push(load());
  const kib = median(rounds.map((r) => r.kib));
  const middle = rounds.find((r) => r.kib === kib)!;
  const open = Math.min(...rounds.map((r) => r.open));
  const short = rounds.find((r) => r.stoppedBy);
  return [row({
    scenario: SCENARIO,
    subject: `${open.toLocaleString("en-US")} idle connections: server RSS per connection`,
    unit: "KiB",
    throughput: kib,
    target: "≤ 30 KiB",
    met: kib <= 30,
    note: [
      `median of ${MEMORY_ROUNDS} rounds, each on a fresh server after 20 warm-up connections (${
        rounds.map((r) => r.kib.toFixed(1)).join(", ")
      } KiB)`,
      `server RSS ${middle.before.toFixed(1)} → ${
        middle.after.toFixed(1)
      } MiB in the median round, 3 s after the last opened`,
      "one server process (RUNPLANE_WORKERS=1, no workers)",
      `the replica's relay and app grew ${middle.replicasMiB.toFixed(1)} MiB (not counted)`,
      ...(short ? [`stopped at ${short.open} of ${CONNECTIONS}: ${short.stoppedBy}`] : []),
      `load average ${loads.join(" → ")}`,
    ].join("; "),
  })];
}

/** Round trips of a small message, one at a time, through Runplane and directly, in alternating rounds. */
async function roundTripRows(paths: { runplane: WebSocket; direct: WebSocket }, log: (m: string) => void) {
  const times = { runplane: [] as number[], direct: [] as number[] };
  const loads = [load()];
  await roundTrips(paths.runplane, { count: 200, text: TEXT });
  await roundTrips(paths.direct, { count: 200, text: TEXT });
  for (let round = 0; round < LATENCY_ROUNDS; round++) {
    if (round % 5 === 0) log(`websocket: round trips, round ${round + 1} of ${LATENCY_ROUNDS}`);
    const order = round % 2 === 0 ? (["direct", "runplane"] as const) : (["runplane", "direct"] as const);
    for (const path of order) {
      times[path].push(...await roundTrips(paths[path], { count: MESSAGES_PER_ROUND, text: TEXT }));
    }
  }
  loads.push(load());
  const [direct, runplane] = [times.direct, times.runplane].map((list) => list.sort((a, b) => a - b));
  const d = { p50: percentile(direct, 50), p99: percentile(direct, 99) };
  const r = { p50: percentile(runplane, 50), p99: percentile(runplane, 99) };
  const added = { p50: r.p50 - d.p50, p99: r.p99 - d.p99 };
  const note = [
    `${LATENCY_ROUNDS} alternating rounds of ${MESSAGES_PER_ROUND} ${TEXT.length}-byte text echoes, one at a time`,
    `on one connection (${direct.length} each); load average ${loads.join(" → ")}`,
  ].join(" ");
  return [
    row({
      scenario: SCENARIO,
      subject: "round trip: directly to the replica's relay socket (baseline)",
      unit: "",
      p50Ms: d.p50,
      p99Ms: d.p99,
      note: `${note}; the relay (the jail's one way in) copies to the app's port`,
    }),
    row({ scenario: SCENARIO, subject: "round trip: through Runplane", unit: "", p50Ms: r.p50, p99Ms: r.p99, note }),
    row({
      scenario: SCENARIO,
      subject: "round trip added by Runplane",
      unit: "",
      p50Ms: added.p50,
      p99Ms: added.p99,
      target: "p50 ≤ 0.5 ms, p99 ≤ 2 ms added",
      met: added.p50 <= 0.5 && added.p99 <= 2,
      note: "through Runplane minus directly, same rounds",
    }),
  ];
}

/** Messages per second on `count` connections of each path, alternating, the median of the rounds. */
async function rateRows(server: BenchServer, options: { socketPath: string; count: number; log(m: string): void }) {
  const runplane = await openMany(through(server), { count: options.count });
  const direct = await openMany({ kind: "direct", socketPath: options.socketPath }, { count: options.count });
  const failed = runplane.stoppedBy ?? direct.stoppedBy;
  if (failed) throw new Error(`opening ${options.count} connections: ${failed}`);
  const rates = { runplane: [] as number[], direct: [] as number[] };
  const loads = [load()];
  const measure = { seconds: RATE_SECONDS, window: WINDOW, text: TEXT };
  try {
    await echoRate(runplane.sockets, { ...measure, seconds: 1 });
    await echoRate(direct.sockets, { ...measure, seconds: 1 });
    for (let round = 0; round < RATE_ROUNDS; round++) {
      options.log(`websocket: messages per second on ${options.count}, round ${round + 1} of ${RATE_ROUNDS}`);
      const order = round % 2 === 0 ? (["direct", "runplane"] as const) : (["runplane", "direct"] as const);
      for (const path of order) {
        rates[path].push(await echoRate(path === "runplane" ? runplane.sockets : direct.sockets, measure));
      }
    }
  } finally {
    await closeAll([...runplane.sockets, ...direct.sockets]);
  }
  loads.push(load());
  const [d, r] = [median(rates.direct), median(rates.runplane)];
  const what = options.count === 1 ? "1 connection" : `${options.count} connections`;
  const note = [
    `median of ${RATE_ROUNDS} alternating rounds of ${RATE_SECONDS} s`,
    `${WINDOW} ${TEXT.length}-byte text echoes in flight per connection`,
    `load average ${loads.join(" → ")}`,
  ].join("; ");
  return [
    row({
      scenario: SCENARIO,
      subject: `messages/s, ${what}: directly (baseline)`,
      unit: "msg/s",
      throughput: d,
      note,
    }),
    row({
      scenario: SCENARIO,
      subject: `messages/s, ${what}: through Runplane`,
      unit: "msg/s",
      throughput: r,
      ratio: r / d,
      note: `${note}; ${(r / d).toFixed(2)}× the direct rate; rounds ${
        rates.runplane.map((v) => Math.round(v)).join(", ")
      } vs directly ${rates.direct.map((v) => Math.round(v)).join(", ")}`,
    }),
  ];
}

/** 20. WebSocket runs: memory per connection, round trip added, messages per second (see the module's comment). */
export async function websocketScenario(context: BenchContext): Promise<BenchRow[]> {
  const rows = await memoryRows(context.log);
  const server = await startServer();
  try {
    const runplane = await openWebSocket(through(server));
    const socketPath = await relaySocketOf(server);
    const direct = await openWebSocket({ kind: "direct", socketPath });
    try {
      rows.push(...await roundTripRows({ runplane, direct }, context.log));
    } finally {
      await closeAll([runplane, direct]);
    }
    for (const count of [1, 100]) rows.push(...await rateRows(server, { socketPath, count, log: context.log }));
    return rows;
  } finally {
    await server.stop();
  }
}
