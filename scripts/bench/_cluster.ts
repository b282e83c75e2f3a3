/**
 * Several benchmark servers on one fresh PostgreSQL database, as one cluster (each given
 * `RUNPLANE_ADVERTISE_URL`, issue 31) or as peers that each count their own replicas, and the timed
 * calls the cluster scenario sends them.
 */
import { freePort } from "../../server/runtime/free_port.ts";
import { createBenchDatabase } from "./_postgres.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "./_runplane.ts";
import { percentile } from "./_sample.ts";

/** Servers sharing one database, stopped (and the database dropped) together. */
export interface BenchCluster {
  hosts: BenchServer[];
  stop(): Promise<void>;
}

/** Options of `startBenchCluster`. */
export interface BenchClusterOptions {
  /** The apps dir every server reads (the same apps everywhere). */
  appsDir: string;
  /** Whether the servers are one cluster (`RUNPLANE_ADVERTISE_URL` set on each) or each counts its own. */
  advertise: boolean;
}

/**
 * Starts `count` servers, one after the other, on a fresh PostgreSQL database (dropped by `stop`), with a
 * 3 s run lease (a dead host's seats free sooner) and a pool of 4 connections each.
 */
export async function startBenchCluster(count: number, options: BenchClusterOptions): Promise<BenchCluster> {
  const database = await createBenchDatabase();
  const hosts: BenchServer[] = [];
  const stop = async () => {
    await Promise.all(hosts.map((host) => host.stop()));
    await database.drop();
  };
  try {
    for (let i = 0; i < count; i++) {
      const port = await freePort();
      const env: Record<string, string> = { RUNPLANE_RUN_LEASE: "3s", RUNPLANE_DATABASE_POOL: "4" };
      if (options.advertise) env.RUNPLANE_ADVERTISE_URL = `http://127.0.0.1:${port}`;
      hosts.push(await startRunplane(env, { databaseUrl: database.url, appsDir: options.appsDir, port }));
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return { hosts, stop };
}

/** Replicas of `app` alive on `host` (starting, idle or busy), as its getApp says. */
export async function replicasOn(host: BenchServer, app: string): Promise<number> {
  const response = await fetch(`${host.url}/v3/projects/${BENCH_PROJECT}/apps/${app}`, {
    headers: { Authorization: `Bearer ${host.token}` },
  });
  if (!response.ok) throw new Error(`getApp ${app} answered ${response.status}: ${await response.text()}`);
  const { replicas } = (await response.json()) as { replicas: { starting: number; idle: number; busy: number } };
  return replicas.starting + replicas.idle + replicas.busy;
}

/** The latencies of `count` sync calls of `app`'s `fn` on `host`, `concurrency` at a time (default 1). */
export async function timeCalls(
  host: BenchServer,
  target: { app: string; fn: string },
  options: { count: number; concurrency?: number },
): Promise<number[]> {
  const latencies: number[] = [];
  let next = 0;
  async function caller(): Promise<void> {
    while (next < options.count) {
      next++;
      const started = performance.now();
      const response = await fetch(`${host.url}/v4/${BENCH_PROJECT}/${target.app}/${target.fn}`, {
        method: "POST",
        headers: { Authorization: `Bearer ${host.token}`, "Content-Type": "application/json" },
        body: "{}",
      });
      const text = await response.text();
      if (!response.ok) {
        throw new Error(`${target.app}/${target.fn} on ${host.url} answered ${response.status}: ${text}`);
      }
      latencies.push(performance.now() - started);
    }
  }
  await Promise.all(Array.from({ length: options.concurrency ?? 1 }, caller));
  return latencies;
}

/** p50, p99 and the maximum of latencies, in milliseconds. */
export function latencySummary(latencies: number[]): { p50Ms: number; p99Ms: number; maxMs: number } {
  const sorted = [...latencies].sort((a, b) => a - b);
  return { p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99), maxMs: sorted[sorted.length - 1] };
}
