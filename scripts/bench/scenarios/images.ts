/**
 * 19. Apps in images (`[build] base_image`), on a server of their own pulling from a loopback
 * `docker-registry` that holds the test base image (Debian trixie + python3, as the image tests cache it: scripts/bench/_images.ts), each
 * measured against its host-system baseline in alternating rounds:
 * - a redeploy that changes nothing but a comment: upload to Ready, an image app against a host app;
 * - a replica's cold start (spawn, jail, interpreter, first call) with the image's root as `/` against
 *   the host's system, the same function, the same jail otherwise;
 * - disk: the same image app deployed as five apps: how many roots are unpacked, and their `du`.
 */
import { execFileSync } from "node:child_process";
import { chmod, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packBundle } from "../../../client/bundle.ts";
import { createLogger } from "../../../server/log.ts";
import { createSandbox } from "../../../server/sandbox/mod.ts";
import { type BenchContext, row } from "../_context.ts";
import { BENCH_IMAGE_TAG, benchBaseImage, startBenchRegistry } from "../_images.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";
import { coldStart, median } from "./sandbox_cost.ts";

const SCENARIO = "19. Images";
const REDEPLOYS = 5;
const COLD_STARTS = 15;
const COPIES = 5;

const MAIN_PY = "def hello():\n    return {'hello': 'world'}\n";

async function bundle(toml: string, comment: string): Promise<Uint8Array<ArrayBuffer>> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-bench-images-"));
  try {
    await writeFile(join(dir, "runplane.toml"), `# ${comment}\n${toml}`);
    await writeFile(join(dir, "main.py"), MAIN_PY);
    return new Uint8Array((await packBundle(dir)).bytes);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Uploads and waits for Ready; the milliseconds from the upload's start. Throws unless it is ready. */
async function deployMs(server: BenchServer, appId: string, bytes: Uint8Array<ArrayBuffer>): Promise<number> {
  const base = `${server.url}/v3/projects/${BENCH_PROJECT}/apps/${appId}/deployments`;
  const headers = { Authorization: `Bearer ${server.token}` };
  const started = performance.now();
  const response = await fetch(base, {
    method: "POST",
    headers: { ...headers, "Content-Type": "application/gzip" },
    body: bytes,
  });
  if (response.status !== 202) throw new Error(`deploying ${appId}: ${response.status} ${await response.text()}`);
  const { deployment_id } = (await response.json()) as { deployment_id: string };
  for (;;) {
    const polled = (await (await fetch(`${base}/${deployment_id}`, { headers })).json()) as {
      status: string;
      error: string | null;
    };
    if (polled.status === "ready") return performance.now() - started;
    if (polled.status === "failed") throw new Error(`deploying ${appId} failed: ${polled.error}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function imageRoots(server: BenchServer): Promise<string[]> {
  const roots = join(server.dataDir, "images", "roots");
  const names = await readdir(roots).catch(() => [] as string[]);
  return names.filter((name) => /^sha256-[0-9a-f]{64}$/.test(name)).map((name) => join(roots, name));
}

function duMiB(paths: string[]): number {
  if (paths.length === 0) return 0;
  const out = execFileSync("du", ["-skxc", "--", ...paths], { encoding: "utf8" });
  return Number.parseInt(out.trim().split("\n").pop()!.split("\t")[0]!, 10) / 1024;
}

async function redeployRows(server: BenchServer, options: { image: string; host: string; log(m: string): void }) {
  const times = { image: [] as number[], host: [] as number[] };
  await deployMs(server, "imaged", await bundle(options.image, "first"));
  await deployMs(server, "hosted", await bundle(options.host, "first"));
  for (let round = 0; round < REDEPLOYS; round++) {
    options.log(`images: no-change redeploys, round ${round + 1} of ${REDEPLOYS}`);
    times.host.push(await deployMs(server, "hosted", await bundle(options.host, `round ${round}`)));
    times.image.push(await deployMs(server, "imaged", await bundle(options.image, `round ${round}`)));
  }
  const [host, image] = [median(times.host), median(times.image)];
  const note = `median of ${REDEPLOYS}; upload → Ready over the REST API`;
  return [
    row({ scenario: SCENARIO, subject: "redeploy, no change: host system (baseline)", unit: "ms", p50Ms: host, note }),
    row({
      scenario: SCENARIO,
      subject: "redeploy, no change: image app",
      unit: "ms",
      p50Ms: image,
      ratio: image / host,
      target: "≤ 2000 ms",
      met: image <= 2000,
      note: `${note}; ${Math.round(image - host)} ms over the host app`,
    }),
  ];
}

async function coldStartRows(root: string, log: (m: string) => void): Promise<BenchRow[]> {
  const jailed = await createSandbox("required", { logger: createLogger({ level: "silent" }) });
  const appDir = await mkdtemp(join(tmpdir(), "runplane-bench-images-cold-"));
  await chmod(appDir, 0o755);
  await writeFile(join(appDir, "main.py"), MAIN_PY);
  const times = { host: [] as number[], image: [] as number[] };
  try {
    await coldStart(jailed, appDir, { egress: false });
    await coldStart(jailed, appDir, { egress: false, image: { root } });
    for (let round = 0; round < COLD_STARTS; round++) {
      if (round % 5 === 0) log(`images: cold starts, round ${round + 1} of ${COLD_STARTS}`);
      times.host.push(await coldStart(jailed, appDir, { egress: false }));
      times.image.push(await coldStart(jailed, appDir, { egress: false, image: { root } }));
    }
  } finally {
    jailed.close();
    await rm(appDir, { recursive: true, force: true });
  }
  const [host, image] = [median(times.host), median(times.image)];
  const note = `median of ${COLD_STARTS}; spawn → first call answered, jailed, no egress`;
  return [
    row({ scenario: SCENARIO, subject: "cold start: host system python3 (baseline)", unit: "ms", p50Ms: host, note }),
    row({
      scenario: SCENARIO,
      subject: "cold start: image python3 (trixie)",
      unit: "ms",
      p50Ms: image,
      ratio: image / host,
      // The target bounds what an image adds; starting faster than the host's interpreter is not a miss.
      target: "≤ 10 ms over the host",
      met: image - host <= 10,
      note: `${note}; ${(image - host).toFixed(1)} ms difference (the image's Python 3.13 against the host's 3.11)`,
    }),
  ];
}

async function diskRows(server: BenchServer, toml: string, log: (m: string) => void): Promise<BenchRow[]> {
  const before = await imageRoots(server);
  const beforeMiB = duMiB(before);
  log(`images: the same image deployed as ${COPIES} apps`);
  for (let n = 0; n < COPIES; n++) await deployMs(server, `copy${n}`, await bundle(toml, `copy ${n}`));
  const after = await imageRoots(server);
  const afterMiB = duMiB(after);
  return [row({
    scenario: SCENARIO,
    subject: `disk: ${COPIES} deployments of one image`,
    unit: "MiB",
    throughput: afterMiB,
    target: "one copy on disk",
    met: after.length === 1,
    note: `unpacked roots: ${before.length} before, ${after.length} after; du of roots ${
      beforeMiB.toFixed(0)
    } MiB before, ${afterMiB.toFixed(0)} MiB after`,
  })];
}

/** 19. Apps in images against the host's system (see the module's comment). */
export async function imagesScenario(context: BenchContext): Promise<BenchRow[]> {
  const layout = await benchBaseImage();
  const registry = await startBenchRegistry();
  let server: BenchServer | undefined;
  try {
    await registry.push(layout, { tag: BENCH_IMAGE_TAG, name: "runplane-bench/trixie:python3" });
    const reference = `${registry.host}/runplane-bench/trixie:python3`;
    server = await startRunplane({
      RUNPLANE_IMAGE_REGISTRIES: registry.host,
      RUNPLANE_INSECURE_REGISTRIES: registry.host,
    }, {
      scopes: ["deploy", "rest", "run"],
    });
    const image = `[build]\nbase_image = "${reference}"\n`;
    const rows = await redeployRows(server, { image, host: "", log: context.log });
    const [root] = await imageRoots(server);
    if (!root) throw new Error("the image app's root was not unpacked");
    rows.push(...await coldStartRows(root, context.log));
    rows.push(...await diskRows(server, image, context.log));
    return rows;
  } finally {
    await server?.stop();
    await registry.close();
  }
}
