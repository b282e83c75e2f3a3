import { execFileSync } from "node:child_process";
import { readFile } from "node:fs/promises";
import { BENCH_PROJECT, startRunplane } from "./_runplane.ts";
import { cpuSeconds, descendantsOf } from "./_processes.ts";
const AUTOCANNON = new URL("../../node_modules/autocannon/autocannon.js", import.meta.url).pathname;
async function nodeKids(pid: number) {
  const out = [] as number[];
  for (const p of await descendantsOf(pid)) {
    const c = await readFile(`/proc/${p}/cmdline`, "utf8").catch(() => "");
    if (c.split("\0")[0] === process.execPath) out.push(p);
  }
  return out;
}
for (const rate of [300, 1000]) {
  for (const workers of ["1", "2"]) {
    const server = await startRunplane({ RUNPLANE_WORKERS: workers });
    const pids = [server.child.pid!, ...(await nodeKids(server.child.pid!))];
    const url = `${server.url}/v4/${BENCH_PROJECT}/echo/run`;
    const args = [
      AUTOCANNON,
      "--json",
      "-c",
      "16",
      "-m",
      "POST",
      "-H",
      `Authorization=Bearer ${server.token}`,
      "-H",
      "Content-Type=application/json",
      "-b",
      "{}",
      "-R",
      String(rate),
    ];
    execFileSync(process.execPath, [...args, "-d", "2", url]);
    const before = await Promise.all(pids.map((p) => cpuSeconds([p])));
    const out = JSON.parse(execFileSync(process.execPath, [...args, "-d", "6", url]).toString());
    const after = await Promise.all(pids.map((p) => cpuSeconds([p])));
    const total = out.requests.total;
    const per = after.map((a, i) => Math.round((a - before[i]) * 1e6 / total));
    console.log(
      `rate ${rate} workers ${workers}: ${
        Math.round(out.requests.average)
      } req/s, p50 ${out.latency.p50} ms, µs/call per process ${per} (sum ${per.reduce((x, y) => x + y, 0)})`,
    );
    await server.stop();
  }
}
