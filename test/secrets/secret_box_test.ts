import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loadSecretBox } from "../../server/secrets/mod.ts";

describe("secret box", () => {
  it("round-trips a secret and never stores the plaintext", async () => {
    const dir = await mkdtemp(join(tmpdir(), "runplane-secrets-"));
    try {
      const box = await loadSecretBox(dir);
      const sealed = box.seal("s3cret-value");
      assert.ok(!sealed.includes("s3cret"));
      assert.equal((await loadSecretBox(dir)).open(sealed), "s3cret-value");
      assert.equal((await stat(join(dir, "keys", "secret_box.key"))).mode & 0o777, 0o600);
      assert.equal((await readFile(join(dir, "keys", "secret_box.key"))).length, 32);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses a sealed value that was altered", async () => {
    const dir = await mkdtemp(join(tmpdir(), "runplane-secrets-"));
    try {
      const box = await loadSecretBox(dir);
      const sealed = box.seal("value");
      const altered = sealed.slice(0, -2) + (sealed.endsWith("A") ? "BB" : "AA");
      assert.throws(() => box.open(altered));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
