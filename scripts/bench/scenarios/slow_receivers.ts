import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { type BenchContext, row } from "../_context.ts";
import { postgresUnavailable } from "../_postgres.ts";
import type { BenchRow } from "../_report.ts";
import { type BenchServer, openServerStore, startRunplane, startRunplaneOnPostgres } from "../_runplane.ts";

const SCENARIO = "12. Slow receivers";
const FAST = 10_000;
const SLOW = 1_000;
/** How long a round with the hanging receiver ahead of the fast one may take before it is cut off. */
const ROUND_LIMIT_MS = 30_000;

/** A receiver on loopback: `fast` answers 204 at once and counts; `dead` reads the request and never answers. */
async function startReceiver(kind: "fast" | "dead") {
  const arrivals: number[] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    if (kind === "dead") return;
    req.on("end", () => {
      arrivals.push(performance.now());
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    arrivals,
    close() {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Puts `count` due deliveries to `endpoint` in the server's outbox, as finished runs leave them. */
async function fillOutbox(server: BenchServer, options: { endpoint: string; count: number; prefix: string }) {
  const store = await openServerStore(server);
  try {
    const now = Date.now();
    for (let i = 0; i < options.count; i += 500) {
      const chunk = Array.from({ length: Math.min(500, options.count - i) }, (_, j) => ({
        run_id: `run_${options.prefix}_${String(i + j).padStart(20, "0")}`,
        endpoint: options.endpoint,
        body: JSON.stringify({ run_id: `${options.prefix}${i + j}`, status: "success", result: { n: i + j } }),
        secret: null,
        credentials: null,
        status: "pending",
        next_attempt_at: now,
        lease_owner: null,
        lease_expires_at: null,
        created_at: now,
        attempt_limit: null,
      }));
      await store.db.insertInto("webhook_deliveries").values(chunk).execute();
    }
  } finally {
    await store.close();
  }
}

interface RoundFigures {
  /** Fast deliveries per second, from their outbox fill to the last arrival (or the cut-off). */
  rate: number;
  received: number;
  seconds: number;
}

/**
 * One round on a fresh server: `slow` deliveries to a receiver that never answers are put in the outbox
 * first (older, so an oldest-first window would take them first), then `FAST` to a fast receiver.
 */
async function round(
  context: BenchContext,
  options: { engine: "sqlite" | "postgres"; slow: number; env?: Record<string, string> },
): Promise<RoundFigures> {
  const env = { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1", RUNPLANE_WEBHOOK_TIMEOUT: "10s", ...options.env };
  const server = options.engine === "postgres" ? await startRunplaneOnPostgres(env) : await startRunplane(env);
  const fast = await startReceiver("fast");
  const dead = await startReceiver("dead");
  try {
    if (options.slow) await fillOutbox(server, { endpoint: dead.url, count: options.slow, prefix: "dead" });
    const started = performance.now();
    await fillOutbox(server, { endpoint: fast.url, count: FAST, prefix: "fast" });
    const deadline = started + ROUND_LIMIT_MS;
    while (fast.arrivals.length < FAST && performance.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const end = fast.arrivals.length === FAST ? fast.arrivals[FAST - 1] : performance.now();
    const seconds = (end - started) / 1000;
    context.log(
      `${SCENARIO}: ${options.engine}, ${options.slow} dead: ${fast.arrivals.length} fast in ${seconds.toFixed(1)} s`,
    );
    return { rate: fast.arrivals.length / seconds, received: fast.arrivals.length, seconds };
  } finally {
    await server.stop();
    await fast.close();
    await dead.close();
  }
}

/** Rounds taken together: all their deliveries over all their seconds. */
function combined(rounds: RoundFigures[]): RoundFigures {
  const received = rounds.reduce((sum, r) => sum + r.received, 0);
  const seconds = rounds.reduce((sum, r) => sum + r.seconds, 0);
  return { rate: received / seconds, received: received / rounds.length, seconds: seconds / rounds.length };
}

/**
 * 12. A receiver that never answers (every attempt runs into the 10 s timeout) with 1,000 deliveries,
 * ahead of 10,000 to a fast one: the fast receiver's rate against its rate alone. The per-destination
 * limit (`RUNPLANE_WEBHOOK_PER_DESTINATION`, 64 of 128) is what keeps the window open; the last row sets
 * it to 128 to show the window without it.
 */
export async function slowReceiversScenario(context: BenchContext): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const engines: Array<"sqlite" | "postgres"> = (await postgresUnavailable()) ? ["sqlite"] : ["sqlite", "postgres"];
  for (const engine of engines) {
    // Interleaved, alone-mixed-mixed-alone, so that the host's drift weighs on both alike.
    const runs: Record<"alone" | "mixed", RoundFigures[]> = { alone: [], mixed: [] };
    for (const kind of ["alone", "mixed", "mixed", "alone"] as const) {
      context.log(
        `${SCENARIO}: ${engine}, ${kind === "alone" ? "fast receiver alone" : `${SLOW} to a dead receiver ahead`}`,
      );
      runs[kind].push(await round(context, { engine, slow: kind === "alone" ? 0 : SLOW }));
    }
    const alone = combined(runs.alone);
    const mixed = combined(runs.mixed);
    const ratio = mixed.rate / alone.rate;
    rows.push(
      row({
        scenario: SCENARIO,
        subject: `${engine}: ${FAST.toLocaleString("en-US")} to a fast receiver alone (baseline)`,
        throughput: alone.rate,
        unit: "deliveries/s",
        note: `${alone.received} delivered in ${alone.seconds.toFixed(1)} s (mean of 2 rounds, interleaved)`,
      }),
      row({
        scenario: SCENARIO,
        subject: `${engine}: the same with ${SLOW.toLocaleString("en-US")} to a dead receiver ahead`,
        throughput: mixed.rate,
        unit: "deliveries/s",
        ratio,
        target: "≥ 0.8× alone",
        met: ratio >= 0.8 && mixed.received === FAST,
        note: `${mixed.received} delivered in ${
          mixed.seconds.toFixed(1)
        } s (mean of 2 rounds); 64 attempts at a time wait on the dead one`,
      }),
    );
  }
  context.log(`${SCENARIO}: sqlite, without a per-destination limit (128 of 128)`);
  const unlimited = await round(context, {
    engine: "sqlite",
    slow: SLOW,
    env: { RUNPLANE_WEBHOOK_PER_DESTINATION: "128" },
  });
  const baseline = rows[0].throughput ?? Number.NaN;
  rows.push(row({
    scenario: SCENARIO,
    subject: "sqlite: dead receiver ahead, per-destination limit 128 (none)",
    throughput: unlimited.rate,
    unit: "deliveries/s",
    ratio: unlimited.rate / baseline,
    target: "report",
    note: `${unlimited.received} of ${FAST} delivered in ${unlimited.seconds.toFixed(1)} s${
      unlimited.received < FAST ? ` (cut off at ${ROUND_LIMIT_MS / 1000} s)` : ""
    }`,
  }));
  return rows;
}
