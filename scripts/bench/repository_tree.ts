/**
 * Measures `getRepositoryTree` on a generated repository: the cold read (git + encoding), a cached
 * read, and a 304, with the server's memory before and after. Run it alone with
 * `npx tsx scripts/bench/repository_tree.ts [files]`, or call `benchRepositoryTree` from the bench runner.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServiceAccount } from "../../server/auth/mod.ts";
import { loadConfig } from "../../server/config.ts";
import { createLogger } from "../../server/log.ts";
import { createServer } from "../../server/mod.ts";
import { createLargeRepo } from "./large_repo.ts";

/** One measurement. */
export interface TreeBenchResult {
  files: number;
  entries: number;
  bodyBytes: number;
  generateMs: number;
  coldMs: number;
  cachedMs: number;
  notModifiedMs: number;
  /** The server process's resident set before the first request and its peak during the run, in MiB. */
  rssBeforeMiB: number;
  rssPeakMiB: number;
}

/** Generates a repository of `files` files, serves it, and times cold, cached and 304 answers. */
export async function benchRepositoryTree(options: { files?: number } = {}): Promise<TreeBenchResult> {
  const files = options.files ?? 100_000;
  const dataDir = await mkdtemp(join(tmpdir(), "runplane-bench-tree-"));
  try {
    const generateStart = performance.now();
    const repo = await createLargeRepo(join(dataDir, "repos", "p-bench", "bench", "large.git"), { files });
    const generateMs = performance.now() - generateStart;
    const config = loadConfig({ PORT: "0", RUNPLANE_DATA_DIR: dataDir, RUNPLANE_LOG_LEVEL: "warn", RUNPLANE_RESPONSE_CHECK: "0" });
    const server = await createServer(config, { logger: createLogger({ level: "warn" }) });
    const url = await server.listen();
    try {
      const { token } = await createServiceAccount(
        { db: server.context.store.db, key: server.context.key },
        { projectId: "p-bench", name: "bench", scopes: ["rest"], expiresAt: Date.now() + 3_600_000 },
      );
      const endpoint = `${url}/v4/projects/p-bench/integrations/github/repos/bench/large/tree`;
      global.gc?.();
      const rssBefore = process.memoryUsage().rss;
      let rssPeak = rssBefore;
      const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 5);
      async function timed(headers: Record<string, string> = {}) {
        const start = performance.now();
        const response = await fetch(endpoint, { headers: { Authorization: `Bearer ${token}`, ...headers } });
        let bytes = 0;
        const reader = response.body?.getReader();
        for (let read = await reader?.read(); read && !read.done; read = await reader!.read()) bytes += read.value.byteLength;
        if (response.status !== 200 && response.status !== 304) throw new Error(`The tree request answered ${response.status}`);
        return { ms: performance.now() - start, bytes, etag: response.headers.get("etag") ?? "" };
      }
      const cold = await timed();
      const cached = await timed();
      const notModified = await timed({ "If-None-Match": cold.etag });
      clearInterval(sampler);
      const mib = (bytes: number) => Math.round(bytes / 1024 / 1024);
      return {
        files,
        entries: repo.entries,
        bodyBytes: cold.bytes,
        generateMs: Math.round(generateMs),
        coldMs: Math.round(cold.ms),
        cachedMs: Math.round(cached.ms),
        notModifiedMs: Math.round(notModified.ms),
        rssBeforeMiB: mib(rssBefore),
        rssPeakMiB: mib(rssPeak),
      };
    } finally {
      await server.close();
    }
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchRepositoryTree({ files: process.argv[2] ? Number(process.argv[2]) : undefined }), null, 2));
}
