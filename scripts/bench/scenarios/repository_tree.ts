import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { type BenchContext, row } from "../_context.ts";
import { memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT } from "../_runplane.ts";
import { createLargeRepo } from "../large_repo.ts";

const run = promisify(execFile);
const FILES = 100_000;

/** Reads a whole response; returns its status, size, ETag and the time it took. */
async function timedGet(url: string, headers: Record<string, string>) {
  const started = performance.now();
  const response = await fetch(url, { headers });
  let bytes = 0;
  for await (const chunk of (response.body ?? []) as unknown as AsyncIterable<Uint8Array>) bytes += chunk.byteLength;
  return { status: response.status, bytes, etag: response.headers.get("etag") ?? "", ms: performance.now() - started };
}

/** 6. The tree of a generated 100,000-file repository: cold, cached, and revalidated with its ETag. */
export async function repositoryTreeScenario(context: BenchContext): Promise<BenchRow[]> {
  const scenario = "6. Repository tree";
  const { runplane } = context;
  context.log(`repository tree: generating a ${FILES.toLocaleString("en-US")}-file repository`);
  const repo = await createLargeRepo(join(runplane.dataDir, "repos", BENCH_PROJECT, "bench", "large.git"), {
    files: FILES,
  });

  context.log("repository tree: git ls-tree directly (baseline)");
  let started = performance.now();
  const { stdout } = await run("git", ["-C", repo.path, "ls-tree", "-r", "-t", "-l", "--full-tree", "-z", "HEAD"], {
    maxBuffer: 512 * 1024 * 1024,
    encoding: "buffer",
  });
  const gitMs = performance.now() - started;

  context.log("repository tree: runplane cold, cached, 304");
  const url = `${runplane.url}/v4/projects/${BENCH_PROJECT}/integrations/github/repos/bench/large/tree`;
  const auth = { Authorization: `Bearer ${runplane.token}` };
  const cold = await timedGet(url, auth);
  const cached = await timedGet(url, auth);
  const revalidated = await timedGet(url, { ...auth, "If-None-Match": cold.etag });
  if (cold.status !== 200 || cached.status !== 200 || revalidated.status !== 304) {
    throw new Error(`Unexpected statuses ${cold.status}, ${cached.status}, ${revalidated.status}`);
  }
  const peak = (await memoryOf(runplane.child.pid!)).peakRssMiB;
  const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
  return [
    row({
      scenario,
      subject: "git ls-tree (baseline)",
      p50Ms: gitMs,
      unit: "",
      note: `${repo.entries.toLocaleString("en-US")} entries, ${mb(stdout.length)} of git output`,
    }),
    row({
      scenario,
      subject: "runplane cold",
      p50Ms: cold.ms,
      peakRssMiB: peak,
      ratio: cold.ms / gitMs,
      target: "cold < 1 s",
      met: cold.ms < 1000,
      note: `${mb(cold.bytes)} JSON; ratio = time over git's`,
    }),
    row({ scenario, subject: "runplane cached (200)", p50Ms: cached.ms, note: "same commit, served from the cache" }),
    row({
      scenario,
      subject: "runplane If-None-Match (304)",
      p50Ms: revalidated.ms,
      target: "cached (ETag) < 50 ms",
      met: revalidated.ms < 50,
    }),
  ];
}
