/** The upload's checked unpacking kept for this host's build (server/deployments/_unpacked.ts). */
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { keepUnpacked, sweepUnpacked, takeUnpacked } from "../../server/deployments/_unpacked.ts";

const DIGEST = `sha256:${"a".repeat(64)}`;

describe("kept unpackings", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "runplane-unpacked-"));
  after(() => rmSync(dataDir, { recursive: true, force: true }));

  function scratch(name: string, text: string): string {
    const dir = join(dataDir, "uploads", name);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "main.py"), text);
    return dir;
  }

  it("keeps the first of equal uploads, removes the second's scratch, and hands the kept one over once", async () => {
    const first = scratch("one", "first");
    const second = scratch("two", "second");
    await keepUnpacked(dataDir, { scratch: first, digest: DIGEST });
    await keepUnpacked(dataDir, { scratch: second, digest: DIGEST });
    assert.deepEqual(readdirSync(join(dataDir, "uploads")), [], "neither scratch folder is left");
    const dir = join(dataDir, "deployments", "dep_1");
    assert.equal(await takeUnpacked(dataDir, { digest: DIGEST, dir }), true);
    assert.equal(readFileSync(join(dir, "main.py"), "utf8"), "first");
    assert.equal(await takeUnpacked(dataDir, { digest: DIGEST, dir: join(dataDir, "deployments", "dep_2") }), false);
  });

  it("removes what it kept when told to (the deployment was not stored)", async () => {
    const drop = await keepUnpacked(dataDir, { scratch: scratch("three", "x"), digest: DIGEST });
    await drop();
    assert.deepEqual(readdirSync(join(dataDir, "unpacked")), []);
  });

  it("sweeps kept folders past their age, and all of them with 0", async () => {
    await keepUnpacked(dataDir, { scratch: scratch("old", "x"), digest: `sha256:${"b".repeat(64)}` });
    await keepUnpacked(dataDir, { scratch: scratch("new", "x"), digest: `sha256:${"c".repeat(64)}` });
    const hourAgo = new Date(Date.now() - 3_600_000);
    utimesSync(join(dataDir, "unpacked", "b".repeat(64)), hourAgo, hourAgo);
    await sweepUnpacked(dataDir, { olderThanMs: 1_800_000, now: Date.now() });
    assert.deepEqual(readdirSync(join(dataDir, "unpacked")), ["c".repeat(64)]);
    await sweepUnpacked(dataDir, { olderThanMs: 0, now: Date.now() });
    assert.deepEqual(readdirSync(join(dataDir, "unpacked")), []);
    assert.equal(existsSync(join(dataDir, "uploads", "new")), false);
  });

  it("sweeps every kept folder with 0 even when the clock reads earlier than their time", async () => {
    // CI once kept a folder made a moment before a sweep with 0: its time was later than the sweep's now.
    await keepUnpacked(dataDir, { scratch: scratch("ahead", "x"), digest: `sha256:${"d".repeat(64)}` });
    await sweepUnpacked(dataDir, { olderThanMs: 0, now: Date.now() - 60_000 });
    assert.deepEqual(readdirSync(join(dataDir, "unpacked")), []);
  });
});
