import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { loadOrCreateKeyFile } from "../../server/keys/key_file.ts";

describe("loadOrCreateKeyFile", async () => {
  const dir = await mkdtemp(join(tmpdir(), "runplane-keyfile-"));
  after(() => rm(dir, { recursive: true, force: true }));

  it("creates the file 0600 in a 0700 folder on first use, then reads it back without creating", async () => {
    const path = join(dir, "first", "keys", "a.key");
    const made = randomBytes(32);
    const first = await loadOrCreateKeyFile(path, () => made);
    assert.deepEqual(first, made);
    assert.equal((await stat(path)).mode & 0o777, 0o600);
    assert.equal((await stat(join(dir, "first", "keys"))).mode & 0o777, 0o700);
    const again = await loadOrCreateKeyFile(path, () => {
      throw new Error("must not create a key that exists");
    });
    assert.deepEqual(again, made);
  });

  it("concurrent first uses agree on one key", async () => {
    const path = join(dir, "race", "b.key");
    const keys = await Promise.all(
      Array.from({ length: 8 }, () => loadOrCreateKeyFile(path, async () => randomBytes(32))),
    );
    for (const key of keys) assert.deepEqual(key, keys[0]);
    assert.equal(keys[0].length, 32);
  });

  it("keeps an existing key as it is and throws read errors other than a missing file", async () => {
    const path = join(dir, "existing.key");
    await writeFile(path, "kept");
    assert.equal((await loadOrCreateKeyFile(path, () => "new")).toString(), "kept");
    // A path through a regular file cannot be read: ENOTDIR, not treated as "missing".
    await assert.rejects(loadOrCreateKeyFile(join(path, "x.key"), () => "new"), { code: "ENOTDIR" });
  });
});
