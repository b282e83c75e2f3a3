import { readFile, writeFile } from "node:fs/promises";
import type { MachineInfo } from "./_machine.ts";

/** One line of the benchmark table. */
export interface BenchRow {
  scenario: string;
  subject: string;
  /** Throughput figure and its unit, e.g. 5321 and `req/s`. */
  throughput: number | null;
  unit: string;
  p50Ms: number | null;
  p99Ms: number | null;
  peakRssMiB: number | null;
  /** This row's throughput over the scenario's baseline row, measured in the same run. */
  ratio: number | null;
  target: string;
  met: boolean | null;
  note: string;
}

/** A whole run. */
export interface BenchReport {
  date: string;
  machine: MachineInfo;
  rows: BenchRow[];
}

function fmt(value: number | null, digits = 1): string {
  if (value === null || Number.isNaN(value)) return "–";
  return value >= 100 ? Math.round(value).toLocaleString("en-US") : value.toFixed(digits);
}

/** The report as a Markdown table with the machine and date. */
export function markdownReport(report: BenchReport): string {
  const m = report.machine;
  const lines = [
    `Measured ${report.date} on ${m.cores} cores (${m.cpuModel}), ${m.memoryGiB} GiB, Node ${m.node}, ${m.platform},`,
    "by `npm run bench` (server, peers and the autocannon load generator each in their own process, on",
    "loopback). Ratios are against the scenario's baseline measured in the same run. Peak RSS is the",
    "server process's high-water mark so far in the run (worker processes not included). The server runs",
    "at `RUNPLANE_LOG_LEVEL=warn`; the row `runplane at log level info vs warn` calls a second server at",
    "the default level `info` (one log line per call), alternating rounds with the `warn` server, and its",
    "ratio is its throughput over the `warn` server's in those same rounds: the cost of logging.",
    "",
    "| Scenario | Subject | Throughput | p50 ms | p99 ms | Peak RSS MiB | Ratio | Target | Met | Note |",
    "|---|---|---:|---:|---:|---:|---:|---|---|---|",
  ];
  for (const r of report.rows) {
    lines.push(
      `| ${r.scenario} | ${r.subject} | ${r.throughput === null ? "–" : `${fmt(r.throughput)} ${r.unit}`} | ${
        fmt(r.p50Ms, 2)
      } | ${fmt(r.p99Ms, 2)} | ${fmt(r.peakRssMiB)} | ${r.ratio === null ? "–" : `${r.ratio.toFixed(2)}×`} | ${
        r.target || "–"
      } | ${r.met === null ? "–" : r.met ? "yes" : "**no**"} | ${r.note} |`,
    );
  }
  return lines.join("\n");
}

/** A fixed-width table for the terminal. */
export function textReport(report: BenchReport): string {
  const header = ["scenario", "subject", "throughput", "p50", "p99", "peakRSS", "ratio", "target", "met"];
  const rows = report.rows.map((r) => [
    r.scenario,
    r.subject,
    r.throughput === null ? "-" : `${fmt(r.throughput)} ${r.unit}`,
    fmt(r.p50Ms, 2),
    fmt(r.p99Ms, 2),
    fmt(r.peakRssMiB),
    r.ratio === null ? "-" : `${r.ratio.toFixed(2)}x`,
    r.target,
    r.met === null ? "-" : r.met ? "yes" : "NO",
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i])).join("  ");
  const notes = report.rows.filter((r) => r.note).map((r) => `  ${r.scenario} / ${r.subject}: ${r.note}`);
  return [line(header), ...rows.map(line), ...(notes.length ? ["", "notes:", ...notes] : [])].join("\n");
}

/** Rows as one small table per scenario (subject → figure). */
function scenarioTables(report: BenchReport): string[] {
  const lines: string[] = [];
  const scenarios = [...new Set(report.rows.map((r) => r.scenario))];
  for (const scenario of scenarios) {
    lines.push(
      "",
      `**${scenario}**`,
      "",
      "| Subject | Figure | p50 ms | p99 ms | Target | Met | Note |",
      "|---|---:|---:|---:|---|---|---|",
    );
    for (const r of report.rows.filter((row) => row.scenario === scenario)) {
      lines.push(
        `| ${r.subject} | ${r.throughput === null ? "–" : `${fmt(r.throughput)} ${r.unit}`} | ${fmt(r.p50Ms, 2)} | ${
          fmt(r.p99Ms, 2)
        } | ${r.target || "–"} | ${r.met === null ? "–" : r.met ? "yes" : "**no**"} | ${r.note} |`,
      );
    }
  }
  return lines;
}

/** A section of tables: where and when measured, how (`how`, lines that follow the first), and the tables. */
function sectionMarkdown(report: BenchReport, how: string[]): string {
  const m = report.machine;
  return [
    `Measured ${report.date} on ${m.cores} cores (${m.cpuModel}), ${m.memoryGiB} GiB, Node ${m.node}, ${m.platform},`,
    ...how,
    ...scenarioTables(report),
  ].join("\n");
}

/** The growth scenarios' rows as one small table per scenario (size → figure), with the machine and date. */
export function growthMarkdown(report: BenchReport): string {
  return sectionMarkdown(report, [
    "each scenario's latest run by `npm run bench -- --scenario <name>` (`records`, `streams`, `cold-start`,",
    "`receivers`, `backlog`; `--scenario growth` runs all five), merged by scenario. Server, receivers and",
    "load each in their own process on loopback; PostgreSQL 15 on the same host.",
  ]);
}

/** The cluster scenario's rows (issue 31: the forwarding hop, cold starts avoided), with the machine and date. */
export function clusterMarkdown(report: BenchReport): string {
  return sectionMarkdown(report, [
    "by `npm run bench -- --scenario cluster`: two or three built servers as one cluster",
    "(`RUNPLANE_ADVERTISE_URL` each) on a fresh PostgreSQL database, the calls sent from the benchmark's",
    "process, all on this one machine over loopback (so the hop's network is loopback's). Latencies are",
    "from the request to the whole answer. The hop rows compare the same calls on the host holding the",
    'app\'s one replica and on the other host (forwarded to it), in alternating rounds; "added" is the',
    "forwarded percentile minus the direct one. Figures are the calls' throughput, or replicas started.",
  ]);
}

/** The cores section's table, with what it measures. */
export function coresMarkdown(report: BenchReport): string {
  return sectionMarkdown(report, [
    "by `npm run bench -- --scenario cores`: for each process count n, bare `node:http` in n processes",
    "(node:cluster), aiohttp in n processes (SO_REUSEPORT) and the built Runplane server with n warm",
    "replicas of one app, behind one front door and (n > 1) behind `RUNPLANE_WORKERS=n`, each driven at",
    "concurrency 64 by autocannon with the sync echo call and with a function burning 2 ms of CPU, in",
    "alternating rounds after a warm-up as long as a round. Runplane's ratio is against aiohttp with as",
    "many processes; its CPU per call is its Node processes' (the front door: one process, or the workers",
    "and their supervisor), from /proc, also as a multiple of bare `node:http`'s CPU per request in the",
    "same rounds (steadier than microseconds: this host's speed drifts); a workers row also says its",
    "throughput over the one front door's in the same rounds. On a lent many-core machine",
    "(`scripts/device/cores_bench.sh`: no bubblewrap there, so Runplane runs unjailed) autocannon has the",
    "last two cores and two threads to itself (`BENCH_LOAD_CPUS`, `BENCH_LOAD_WORKERS`), everything else",
    "the other cores; `BENCH_CORES_WORKERS` adds worker counts other than n.",
  ]);
}

/** The "In images" section of docs/performance.md: `npm run bench -- --scenario images`. */
export function imagesMarkdown(report: BenchReport): string {
  return sectionMarkdown(report, [
    "by `npm run bench -- --scenario images`: a server of its own pulling the test base image (Debian",
    "trixie + python3, made by mmdebstrap) from a loopback `docker-registry`. A redeploy changing only a",
    "comment, upload to Ready over the REST API, an image app against a host-system app in alternating",
    "rounds; a replica's cold start (spawn, jail, interpreter, first call answered) with the image's root",
    "as `/` against the host's system in alternating rounds, both jailed; and the same image deployed as",
    "five apps, its unpacked roots counted and measured with `du` before and after.",
  ]);
}

/** The "WebSockets" section of docs/performance.md: `npm run bench -- --scenario websocket`. */
export function websocketsMarkdown(report: BenchReport): string {
  return sectionMarkdown(report, [
    "by `npm run bench -- --scenario websocket`: built servers of its own (one process each,",
    "`RUNPLANE_WORKERS=1`) serving a custom-runtime echo app (Python's standard library, one jailed replica",
    "of `replica_concurrency = 1000`), the `ws` clients in the benchmark's process, all on loopback. Memory",
    "is the server process's RSS with the idle connections open minus before, per connection, each round on",
    "a fresh server. The baseline connects to the replica's relay socket, the jail's one way in (where",
    "Runplane's own side connects), so \"added\" is Runplane's hop alone; round trips and messages per",
    "second alternate the two paths round by round in the same run.",
  ]);
}

/** The "Batching" section of docs/performance.md: `npm run bench -- --scenario batching`. */
export function batchingMarkdown(report: BenchReport): string {
  return sectionMarkdown(report, [
    "by `npm run bench -- --scenario batching`: a built server of its own (one process, `RUNPLANE_WORKERS=1`),",
    "one jailed replica of `replica_concurrency = 1` per app, autocannon at 64 concurrent callers on",
    "loopback, the unbatched and batched functions in alternating rounds after a warm-up. The work",
    "function sleeps 20 ms per invocation plus 0.1 ms per item; the NumPy model is the example",
    "examples/apps/p-demo/embed. The mean batch size is the server's `runplane_batch_size` histogram's.",
  ]);
}

/** The "Volumes" section of docs/performance.md: `npm run bench -- --scenario volumes`. */
export function volumesMarkdown(report: BenchReport): string {
  return sectionMarkdown(report, [
    "by `npm run bench -- --scenario volumes`: a built server of its own (one process, `RUNPLANE_WORKERS=1`,",
    "`RUNPLANE_VOLUMES_MODE=loop` as root: the volume an ext4 image on the same disk, loop-mounted), one",
    "random file of 500 MiB. Upload streams it from a file through `PUT …/files/{path}` (curl); download",
    "streams `GET …/files/{path}` into a file (curl); each against `cp` of the same file on this disk (page",
    "cache warm for both), rounds interleaved, throughput from the medians; an upload answers once its data",
    "is synced to disk, so `cp` + `sync` is shown beside it. The cold start is a new app each round (its",
    "template, the `[runtime] preload` module reading the whole file from its read-only volume, the fork,",
    "the first call, from the first request) against `cat file > /dev/null` of the same file.",
  ]);
}

/** The "CLI start" section of docs/performance.md: `npm run bench -- --scenario cli`. */
export function cliMarkdown(report: BenchReport): string {
  return sectionMarkdown(report, [
    "by `npm run bench -- --scenario cli` (or `npx tsx scripts/bench/scenarios/cli_start.ts`): each command a",
    "new process from the checkout's bin (the CLI compiled into node_modules/.cache/runplane-cli/), rounds",
    "interleaving `node -e 0`, `runplane --help`, `runplane apps list` against the bench server and the same",
    "through tsx, wall time per process and its CPU (user + system, GNU time) in the notes, medians. On a",
    "machine without Node (the device tool's), `scripts/device/cli_bench.sh` runs it from a kit.",
  ]);
}

/** Where `writeReadmeSection` writes: the section's marker name and its heading. */
export interface ReadmeSectionOptions {
  /** Default `performance`. */
  section?: "performance" | "growth" | "cluster" | "cores" | "images" | "websockets" | "batching" | "cli" | "volumes";
}

const SECTION_TITLES = {
  performance: "Performance",
  growth: "Cost as the work grows",
  cluster: "Across hosts",
  cores: "On every core",
  images: "In images",
  websockets: "WebSockets",
  batching: "Batching",
  cli: "CLI start",
  volumes: "Volumes",
} as const;

/** Replaces a section of docs/performance.md (up to the next `<!-- section:` marker or the end); default Performance. */
export async function writeReadmeSection(
  readmePath: string,
  markdown: string,
  options: ReadmeSectionOptions = {},
): Promise<void> {
  const section = options.section ?? "performance";
  const readme = await readFile(readmePath, "utf8");
  const marker = `<!-- section: ${section} -->`;
  const start = readme.indexOf(marker);
  if (start < 0) throw new Error(`${readmePath} has no ${marker} marker`);
  const rest = readme.slice(start + marker.length);
  const next = rest.indexOf("<!-- section:");
  const tail = next < 0 ? "" : rest.slice(next);
  const body = `${marker}\n## ${SECTION_TITLES[section]}\n\n${markdown}\n\n`;
  await writeFile(readmePath, readme.slice(0, start) + body + tail);
}
