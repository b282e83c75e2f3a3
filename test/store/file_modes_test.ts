import assert from "node:assert/strict";
import { chmodSync, statSync, writeFileSync } from "node:fs";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { openStore } from "../../server/store/mod.ts";
import { startTestServer, type TestServer } from "../_helpers/server.ts";

function mode(path: string): string {
  return (statSync(path).mode & 0o777).toString(8).padStart(3, "0");
}

describe("data dir and store file modes", () => {
  let parent: string;
  let t: TestServer;
  let umask: number;
  before(async () => {
    // The most permissive umask: the modes must not depend on the one the server was started with.
    umask = process.umask(0);
    parent = await mkdtemp(join(tmpdir(), "runplane-modes-"));
    t = await startTestServer({ dataDir: join(parent, "data", "dir") });
    // The test token's service account is written through the WAL.
    await t.server.context.store.db.selectFrom("service_accounts").selectAll().executeTakeFirstOrThrow();
  });
  after(async () => {
    await t.close();
    process.umask(umask);
    await rm(parent, { recursive: true, force: true });
  });

  it("creates the data dir 0700", () => {
    assert.equal(mode(t.dataDir), "700");
  });

  it("creates runplane.sqlite3, its WAL and its shared-memory file 0600", async () => {
    const names = (await readdir(t.dataDir)).filter((name) => name.startsWith("runplane.sqlite3"));
    assert.deepEqual(names.sort(), ["runplane.sqlite3", "runplane.sqlite3-shm", "runplane.sqlite3-wal"]);
    for (const name of names) assert.equal(mode(join(t.dataDir, name)), "600", name);
  });

  it("keeps the key files 0600 in a 0700 folder", async () => {
    const keys = join(t.dataDir, "keys");
    assert.equal(mode(keys), "700");
    const files = await readdir(keys);
    assert.ok(files.length >= 2, files.join(", "));
    for (const name of files) assert.equal(mode(join(keys, name)), "600", name);
  });

  it("tightens an existing store left 0644 by an older version", async () => {
    const dir = join(parent, "old");
    const first = await openStore(dir);
    await first.close();
    const path = join(dir, "runplane.sqlite3");
    chmodSync(path, 0o644);
    writeFileSync(`${path}-wal`, "", { mode: 0o644 });
    chmodSync(`${path}-wal`, 0o644);
    const again = await openStore(dir);
    try {
      assert.equal(mode(path), "600");
      assert.equal(mode(`${path}-wal`), "600");
    } finally {
      await again.close();
    }
  });
});
