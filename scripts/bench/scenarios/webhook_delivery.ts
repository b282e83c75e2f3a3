import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { type BenchContext, row } from "../_context.ts";
import { postgresVersusSqlite } from "../_engines.ts";
import { loadTest } from "../_load.ts";
import { memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer } from "../_runplane.ts";

// About as long as the other scenarios' 8 s, so that starting the load generator is not a share of it.
const DELIVERIES = 20_000;
const WARM_UP = 1000;

/** 4. Signed webhook deliveries, recorded and sent to a local receiver. */
export async function webhookDeliveryScenario(context: BenchContext): Promise<BenchRow[]> {
  const scenario = "4. Webhook delivery";
  const { runplane } = context;
  let received = 0;
  let firstAt = 0;
  let lastAt = 0;
  let signed = 0;
  const receiver = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      received++;
      lastAt = performance.now();
      if (received === 1) firstAt = lastAt;
      if (req.headers["x-runplane-webhook-signature"]) signed++;
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;

  /** Makes `amount` deliveries through `server` and waits for them: from the first arrival to the last. */
  async function deliver(server: BenchServer, amount: number) {
    received = 0;
    signed = 0;
    const url = `${server.url}/v4/${BENCH_PROJECT}/echo/run?webhookEndpoint=${encodeURIComponent(hook)}`;
    const calls = await loadTest(url, {
      method: "POST" as const,
      headers: {
        Authorization: `Bearer ${server.token}`,
        "Content-Type": "application/json",
        "X-Webhook-Secret": "bench-secret",
      },
      body: JSON.stringify({ name: "bench" }),
      connections: 32,
      amount,
    });
    const deadline = Date.now() + 120_000;
    while (received < amount - calls.non2xx && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    // From the first delivery's arrival to the last one's: the load generator's start is not counted.
    return { rate: (received - 1) / ((lastAt - firstAt) / 1000), received, signed, calls };
  }

  try {
    context.log("webhook: direct POSTs to the receiver (baseline)");
    const body = JSON.stringify({
      run_id: "run_00000000000000000000000000",
      status: "success",
      result: { hello: "bench" },
      error: null,
      run_time_ms: 0.1,
      timestamp: new Date().toISOString(),
    });
    const signature = `v1,${createHmac("sha256", "bench-secret").update(`run_x.1.${body}`).digest("hex")}`;
    const direct = await loadTest(hook, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Runplane-Webhook-Signature": signature },
      body,
      amount: DELIVERIES,
      connections: 32,
    });

    // Like every other scenario, the measured part starts warm: the webhook path's code is compiled.
    context.log(`webhook: warming up with ${WARM_UP} deliveries`);
    await deliver(runplane, WARM_UP);

    context.log(`webhook: ${DELIVERIES} signed deliveries through runplane`);
    const ours = await deliver(runplane, DELIVERIES);
    const memory = await memoryOf(runplane.child.pid!);
    const half = DELIVERIES / 2;
    const postgres = await postgresVersusSqlite(context, {
      scenario,
      unit: "deliveries/s",
      target: "report",
      warmUp: (server) => deliver(server, WARM_UP),
      measure: async (server) => {
        const round = await deliver(server, half);
        return { rate: round.rate, failures: half - Math.min(round.received, round.signed) };
      },
    });
    return [
      row({
        scenario,
        subject: "direct POSTs (baseline)",
        throughput: direct.requestsPerSecond,
        p50Ms: direct.p50Ms,
        p99Ms: direct.p99Ms,
      }),
      row({
        scenario,
        subject: "runplane deliveries",
        throughput: ours.rate,
        unit: "deliveries/s",
        peakRssMiB: memory.peakRssMiB,
        ratio: ours.rate / direct.requestsPerSecond,
        target: "≥ 3,000/s",
        met: ours.rate >= 3000 && ours.signed === ours.received && ours.received === DELIVERIES,
        note:
          `${ours.received} of ${DELIVERIES} delivered, ${ours.signed} signed; the sync calls that made them ran at ${
            Math.round(ours.calls.requestsPerSecond)
          }/s`,
      }),
      postgres,
    ];
  } finally {
    await new Promise((r) => receiver.close(r));
  }
}
