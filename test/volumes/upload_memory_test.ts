/**
 * A 200 MiB file uploaded to a volume of a server process (started by the test helpers as production
 * starts it) is streamed to disk, never held: the process's resident memory grows by less than 64 MiB
 * while it arrives; its SHA-256 is right, and it downloads whole with the same digest. The upload and
 * download rates are printed (not asserted: the machine is shared).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { checkResponse } from "../../server/http/mod.ts";
import { findRoute } from "../_helpers/contract.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startServerProcess,
} from "../_helpers/server_process.ts";

const MIB = 1024 * 1024;
const FILE_MIB = 200;

/** The process's resident set in bytes (`VmRSS`). */
function rss(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(match![1]) * 1024;
}

/** 200 MiB of bytes that differ in every MiB, made as they are sent. */
async function* content(hash: ReturnType<typeof createHash>): AsyncGenerator<Uint8Array> {
  const block = Buffer.alloc(MIB);
  for (let i = 0; i < FILE_MIB; i++) {
    block.fill(i % 251);
    block.writeUInt32BE(i, 0);
    const chunk = Buffer.from(block);
    hash.update(chunk);
    yield chunk;
  }
}

describe("a 200 MiB upload to a volume of a server process", () => {
  let dirs: ServerDirs;
  let server: ServerProcess;

  before(async () => {
    dirs = await makeServerDirs("runplane-volume-rss-");
    server = await startServerProcess({ ...dirs.env, RUNPLANE_VOLUMES_MODE: "directory" });
  });
  after(async () => {
    await server?.kill();
    await dirs?.remove();
  });

  it("is streamed to disk: RSS grows < 64 MiB, its sha256 is right, and it downloads whole", async () => {
    const pid = server.child.pid!;
    const headers = { Authorization: `Bearer ${server.token}` };
    const base = `${server.url}/v3/projects/${PROCESS_PROJECT}/volumes/weights`;
    const made = await fetch(base, {
      method: "PUT",
      headers: { ...headers, "Content-Type": "application/json" },
      body: JSON.stringify({ size_gb: 1 }),
    });
    assert.equal(made.status, 201);
    // Warm: a first small upload loads every module the path needs.
    const warm = await fetch(`${base}/files/warm.bin`, {
      method: "PUT",
      headers: { ...headers, "Content-Type": "application/octet-stream" },
      body: new Uint8Array(MIB),
    });
    assert.equal(warm.status, 201);
    const baseline = rss(pid);
    let peak = baseline;
    const sampler = setInterval(() => (peak = Math.max(peak, rss(pid))), 25);
    const hash = createHash("sha256");
    const started = performance.now();
    const put = await fetch(`${base}/files/models/big.bin`, {
      method: "PUT",
      headers: { ...headers, "Content-Type": "application/octet-stream" },
      body: content(hash) as unknown as BodyInit,
      duplex: "half",
    } as RequestInit);
    const uploadMs = performance.now() - started;
    clearInterval(sampler);
    peak = Math.max(peak, rss(pid));
    assert.equal(put.status, 201);
    const written = (await put.json()) as { path: string; size: number; sha256: string };
    const expected = hash.digest("hex");
    assert.deepEqual(written, { path: "models/big.bin", size: FILE_MIB * MIB, sha256: expected });
    const growth = peak - baseline;
    console.log(
      `upload ${FILE_MIB} MiB: ${(uploadMs / 1000).toFixed(2)} s (${
        (FILE_MIB / (uploadMs / 1000)).toFixed(0)
      } MiB/s); RSS ${(baseline / MIB).toFixed(0)} MiB before, peak growth ${(growth / MIB).toFixed(1)} MiB`,
    );
    assert.ok(growth < 64 * MIB, `RSS grew by ${(growth / MIB).toFixed(1)} MiB`);

    const downloadStarted = performance.now();
    const got = await fetch(`${base}/files/models/big.bin`, { headers });
    const route = findRoute("GET", new URL(got.url).pathname)!;
    const snapshot: Record<string, string> = {};
    got.headers.forEach((value, name) => (snapshot[name] = value));
    assert.deepEqual(
      checkResponse(route, {
        status: got.status,
        headers: snapshot,
        contentType: "application/octet-stream",
        body: undefined,
      }),
      [],
    );
    assert.equal(got.headers.get("etag"), `"${expected}"`);
    const downloaded = createHash("sha256");
    let size = 0;
    for await (const chunk of got.body as unknown as AsyncIterable<Uint8Array>) {
      downloaded.update(chunk);
      size += chunk.length;
    }
    const downloadMs = performance.now() - downloadStarted;
    console.log(
      `download ${FILE_MIB} MiB: ${(downloadMs / 1000).toFixed(2)} s (${
        (FILE_MIB / (downloadMs / 1000)).toFixed(0)
      } MiB/s)`,
    );
    assert.equal(size, FILE_MIB * MIB);
    assert.equal(downloaded.digest("hex"), expected);
  });
});
