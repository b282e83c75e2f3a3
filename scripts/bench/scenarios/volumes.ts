/**
 * 22. Project volumes (issue 48), on a server of its own (`RUNPLANE_VOLUMES_MODE=loop` as root: each volume
 * an ext4 image, loop-mounted; `directory` otherwise) with one volume of 2 GiB:
 * - upload and download throughput of one `BENCH_VOLUME_MIB` file (default 500) through the files API
 *   (curl streaming from and to a file on this disk), against `cp` of the same file on this disk, in
 *   interleaved rounds; the ratio is cp's time over the API's (target ≥ 0.7×); and `cp` then `sync`, what
 *   an upload does before it answers (its data on disk);
 * - the cold start of an app whose `[runtime] preload` module reads that file whole from the volume
 *   (a fresh app each round: template, preload, fork, first call), against `cat file > /dev/null`.
 */
import { execFileSync } from "node:child_process";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { type BenchContext, row } from "../_context.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";
import { median } from "./sandbox_cost.ts";
import { unmountUnder } from "../../../server/volumes/mod.ts";

const SCENARIO = "22. Volumes";
const MIB = Number(process.env.BENCH_VOLUME_MIB ?? 500);
const ROUNDS = Number(process.env.BENCH_VOLUME_ROUNDS ?? 5);
const COLD_ROUNDS = Number(process.env.BENCH_VOLUME_COLD_ROUNDS ?? 3);

const PRELOAD = `import os, time
_started = time.monotonic()
with open("/models/weights.bin", "rb") as f:
    WEIGHTS = f.read()
READ_S = time.monotonic() - _started
`;
const MAIN = `import weights_loader

def size():
    return {"bytes": len(weights_loader.WEIGHTS), "read_s": weights_loader.READ_S}
`;
const TOML = `[volumes]\nweights = { volume = "weights", path = "/models", read_only = true }\n`
  + `[runtime]\npreload = ["weights_loader"]\n[hardware]\nmemory = ${Math.max(1, Math.ceil((MIB * 2.5) / 1024))}\n`;

function seconds(from: bigint): number {
  return Number(process.hrtime.bigint() - from) / 1e9;
}

async function timed(step: () => Promise<unknown> | unknown): Promise<number> {
  const started = process.hrtime.bigint();
  await step();
  return seconds(started);
}

function api(server: BenchServer, path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${server.url}/v3/projects/${BENCH_PROJECT}/volumes${path}`, {
    ...init,
    headers: { Authorization: `Bearer ${server.token}`, ...init.headers },
  });
}

/** Uploads `file` with curl (a client that costs little: the figure is the server's). */
function upload(server: BenchServer, file: string): void {
  const status = execFileSync("curl", [
    "-sS",
    "-o",
    "/dev/null",
    "-w",
    "%{http_code}",
    "-X",
    "PUT",
    "-H",
    `Authorization: Bearer ${server.token}`,
    "-H",
    "Content-Type: application/octet-stream",
    "--data-binary",
    `@${file}`,
    `${server.url}/v3/projects/${BENCH_PROJECT}/volumes/weights/files/weights.bin`,
  ]).toString();
  if (status !== "200" && status !== "201") throw new Error(`upload: ${status}`);
}

/** Downloads the file with curl into `file`. */
function download(server: BenchServer, file: string): void {
  const status = execFileSync("curl", [
    "-sS",
    "-o",
    file,
    "-w",
    "%{http_code}",
    "-H",
    `Authorization: Bearer ${server.token}`,
    `${server.url}/v3/projects/${BENCH_PROJECT}/volumes/weights/files/weights.bin`,
  ]).toString();
  if (status !== "200") throw new Error(`download: ${status}`);
}

function throughputRows(label: string, times: { api: number[]; cp: number[] }): BenchRow[] {
  const apiMiBs = MIB / median(times.api);
  const cpMiBs = MIB / median(times.cp);
  const ratio = apiMiBs / cpMiBs;
  return [
    row({
      scenario: `${SCENARIO}: ${label}`,
      subject: "cp (same disk)",
      throughput: Math.round(cpMiBs),
      unit: "MiB/s",
      note: `${MIB} MiB, median of ${times.cp.length}`,
    }),
    row({
      scenario: `${SCENARIO}: ${label}`,
      subject: "runplane files API",
      throughput: Math.round(apiMiBs),
      unit: "MiB/s",
      ratio: Number(ratio.toFixed(2)),
      target: "≥ 0.7× cp",
      met: ratio >= 0.7,
      note: `median of ${times.api.length}, rounds interleaved with cp`,
    }),
  ];
}

/** A fresh app (a new template) whose preload reads the weights; seconds to its first answer. */
async function coldStart(
  server: BenchServer,
  appsDir: string,
  round: number,
): Promise<{ total: number; read: number }> {
  const name = `weights-${round}-${Date.now()}`;
  const dir = join(appsDir, BENCH_PROJECT, name);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "runplane.toml"), TOML);
  await writeFile(join(dir, "weights_loader.py"), PRELOAD);
  await writeFile(join(dir, "main.py"), MAIN);
  const started = process.hrtime.bigint();
  for (;;) {
    const answer = await fetch(`${server.url}/v4/${BENCH_PROJECT}/${name}/size`, {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
      body: "{}",
    });
    const text = await answer.text();
    // 404 until the apps folder's poll has seen the new app.
    if (answer.status === 404) continue;
    if (answer.status !== 200) {
      throw new Error(`cold start: ${answer.status} ${text}\n${server.output().split("\n").slice(-15).join("\n")}`);
    }
    const { result } = JSON.parse(text) as { result: { bytes: number; read_s: number } };
    if (result.bytes !== MIB * 1024 * 1024) throw new Error(`the preload read ${result.bytes} bytes`);
    return { total: seconds(started), read: result.read_s };
  }
}

/** Upload, download and cold start through a volume, each against the host's own tools on the same file. */
export async function volumesScenario(context: BenchContext): Promise<BenchRow[]> {
  const root = process.getuid?.() === 0;
  const work = await mkdtemp(join(tmpdir(), "runplane-bench-volumes-"));
  const dataDir = join(work, "data");
  const appsDir = join(work, "apps");
  await mkdir(join(appsDir, BENCH_PROJECT), { recursive: true });
  const source = join(work, "weights.bin");
  await pipeline(createReadStream("/dev/urandom", { end: MIB * 1024 * 1024 - 1 }), createWriteStream(source));
  const server = await startRunplane(
    { RUNPLANE_VOLUMES_MODE: root ? "loop" : "directory" },
    { appsDir, dataDir, scopes: ["rest", "run", "deploy"] },
  );
  try {
    const made = await api(server, "/weights", {
      method: "PUT",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ size_gb: 2 }),
    });
    if (made.status !== 201) throw new Error(`volume: ${made.status} ${await made.text()}`);
    const up = { api: [] as number[], cp: [] as number[] };
    const cpSync: number[] = [];
    const down = { api: [] as number[], cp: [] as number[] };
    // A warm-up of each path (the page cache holds the source for every round after).
    await upload(server, source);
    await download(server, join(work, "down.bin"));
    for (let round = 0; round < ROUNDS; round++) {
      const copy = join(work, `copy-${round}.bin`);
      up.cp.push(await timed(() => execFileSync("cp", [source, copy])));
      up.api.push(await timed(() => upload(server, source)));
      // What an upload also does before it answers: the file's data on disk (fsync), then the rename.
      cpSync.push(
        await timed(() => execFileSync("sh", ["-c", 'cp "$1" "$2" && sync "$2"', "sh", source, `${copy}.synced`])),
      );
      await rm(`${copy}.synced`, { force: true });
      down.api.push(await timed(() => download(server, join(work, `down-${round}.bin`))));
      down.cp.push(await timed(() => execFileSync("cp", [copy, join(work, `back-${round}.bin`)])));
      for (const name of [copy, join(work, `down-${round}.bin`), join(work, `back-${round}.bin`)]) {
        await rm(name, { force: true });
      }
      context.log(
        `volumes: round ${round + 1}/${ROUNDS}: up ${up.api.at(-1)!.toFixed(2)} s (cp ${
          up.cp.at(-1)!.toFixed(2)
        } s), down ${down.api.at(-1)!.toFixed(2)} s (cp ${down.cp.at(-1)!.toFixed(2)} s)`,
      );
    }
    const inVolume = join(dataDir, "volumes", BENCH_PROJECT, "weights", "files", "weights.bin");
    const cold: Array<{ total: number; read: number }> = [];
    const cat: number[] = [];
    for (let round = 0; round < COLD_ROUNDS; round++) {
      cat.push(await timed(() => execFileSync("sh", ["-c", 'cat "$1" > /dev/null', "sh", inVolume])));
      cold.push(await coldStart(server, appsDir, round));
      context.log(
        `volumes: cold start ${cold.at(-1)!.total.toFixed(2)} s (its read ${cold.at(-1)!.read.toFixed(2)} s), cat ${
          cat.at(-1)!.toFixed(2)
        } s`,
      );
    }
    const coldMs = median(cold.map((c) => c.total)) * 1000;
    const readMs = median(cold.map((c) => c.read)) * 1000;
    const catMs = median(cat) * 1000;
    return [
      ...throughputRows("upload", up),
      row({
        scenario: `${SCENARIO}: upload`,
        subject: "cp + sync (same disk)",
        throughput: Math.round(MIB / median(cpSync)),
        unit: "MiB/s",
        note: `median of ${cpSync.length}: the data on disk before it answers, as an upload's is`,
      }),
      ...throughputRows("download", down),
      row({
        scenario: `${SCENARIO}: cold start reading ${MIB} MiB`,
        subject: "cat file > /dev/null",
        unit: "",
        p50Ms: Math.round(catMs),
        note: `median of ${cat.length}, the file in the volume`,
      }),
      row({
        scenario: `${SCENARIO}: cold start reading ${MIB} MiB`,
        subject: "runplane: new app, preload reads it",
        unit: "",
        p50Ms: Math.round(coldMs),
        note: `median of ${cold.length}: template start, preload (its read alone ${
          Math.round(readMs)
        } ms), fork, first call`,
      }),
    ];
  } finally {
    await server.stop();
    await unmountUnder(join(dataDir, "volumes")).catch(() => undefined);
    await rm(work, { recursive: true, force: true });
  }
}
