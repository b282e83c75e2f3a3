import { randomBytes } from "node:crypto";
import { gzipSync } from "node:zlib";
import { pack } from "tar-stream";
import { type BenchContext, row } from "../_context.ts";
import { memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";

const MIB = 1024 * 1024;

/** An app folder as a gzip tarball, with `big` (incompressible) as `data.bin` when given. */
async function bundleWith(tag: string, big?: Buffer): Promise<Uint8Array<ArrayBuffer>> {
  const tar = pack();
  tar.entry({ name: "runplane.toml" }, `[deployment]\nname = "big"\n`);
  tar.entry({ name: "main.py" }, `def run():\n    return {"tag": "${tag}"}\n`);
  if (big) tar.entry({ name: "data.bin" }, big);
  tar.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of tar) chunks.push(chunk as Buffer);
  return new Uint8Array(gzipSync(Buffer.concat(chunks), { level: 1 }));
}

/** Uploads `bundle` as `appId` and waits for its build to end; throws unless it is ready. */
async function deploy(server: BenchServer, appId: string, bundle: Uint8Array<ArrayBuffer>): Promise<void> {
  const base = `${server.url}/v3/projects/${BENCH_PROJECT}/apps/${appId}/deployments`;
  const headers = { Authorization: `Bearer ${server.token}` };
  const response = await fetch(base, {
    method: "POST",
    headers: { ...headers, "Content-Type": "application/gzip" },
    body: bundle,
  });
  if (response.status !== 202) throw new Error(`deploying ${appId}: ${response.status} ${await response.text()}`);
  const { deployment_id } = (await response.json()) as { deployment_id: string };
  for (;;) {
    const polled = (await (await fetch(`${base}/${deployment_id}`, { headers })).json()) as {
      status: string;
      error: string | null;
    };
    if (polled.status === "ready") return;
    if (polled.status === "failed") throw new Error(`deploying ${appId} failed: ${polled.error}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/**
 * 15. Three ~99 MiB bundles (incompressible bytes) deployed at once, on a server of their own, while
 * /healthz is called every 20 ms: uploads stream to disk and to the store, so the server's RSS and its
 * other requests do not notice them.
 */
export async function bundleUploadsScenario(context: BenchContext): Promise<BenchRow[]> {
  const scenario = "15. Bundle uploads";
  const server = await startRunplane({}, { scopes: ["deploy", "rest", "run"] });
  try {
    context.log("bundle uploads: warming up");
    await deploy(server, "warm", await bundleWith("warm"));
    const bundles = await Promise.all(["a", "b", "c"].map((tag) => bundleWith(tag, randomBytes(99 * MIB))));
    const pid = server.child.pid!;
    const before = await memoryOf(pid);
    let peakRssMiB = before.rssMiB;
    const latencies: number[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const at = performance.now();
        await (await fetch(`${server.url}/healthz`)).arrayBuffer();
        latencies.push(performance.now() - at);
        peakRssMiB = Math.max(peakRssMiB, (await memoryOf(pid)).rssMiB);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    context.log("bundle uploads: three 99 MiB bundles at once");
    const started = performance.now();
    try {
      await Promise.all(bundles.map((bundle, i) => deploy(server, `big-${i}`, bundle)));
    } finally {
      polling = false;
      await poller;
    }
    const seconds = (performance.now() - started) / 1000;
    const after = await memoryOf(pid);
    // VmHWM catches a peak between two samples; when it did not rise, the peak was the sampled one.
    const peak = Math.max(peakRssMiB, after.peakRssMiB > before.peakRssMiB ? after.peakRssMiB : 0);
    const growthMiB = peak - before.rssMiB;
    latencies.sort((a, b) => a - b);
    const at = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))];
    return [
      row({
        scenario,
        subject: "runplane /healthz during 3 × 99 MiB deploys",
        throughput: (3 * bundles[0].byteLength) / MIB / seconds,
        unit: "MiB/s",
        p50Ms: at(50),
        p99Ms: at(99),
        peakRssMiB: peak,
        target: "/healthz p99 < 100 ms, RSS growth < 64 MiB",
        met: at(99) < 100 && growthMiB < 64,
        note: `RSS growth ${
          growthMiB.toFixed(1)
        } MiB; ${latencies.length} /healthz calls; throughput is upload to ready`,
      }),
    ];
  } finally {
    await server.stop();
  }
}
