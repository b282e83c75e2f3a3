import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { spoolBody } from "../../server/http/spool_body.ts";
import { ProblemError } from "../../server/problems/mod.ts";

async function* pieces(count: number, size: number): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < count; i++) yield randomBytes(size);
}

describe("spoolBody", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-spool-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("writes the body to a file with its size and its sha256, and removes it on request", async () => {
    const parts = [randomBytes(70_000), randomBytes(3), randomBytes(200_000)];
    const body = await spoolBody(
      (async function*() {
        yield* parts;
      })(),
      { dir, limitBytes: 1024 * 1024 },
    );
    const whole = Buffer.concat(parts);
    assert.equal(body.size, whole.length);
    assert.equal(body.digest, `sha256:${createHash("sha256").update(whole).digest("hex")}`);
    assert.deepEqual(await readFile(body.path), whole);
    await body.remove();
    assert.deepEqual(await readdir(dir), []);
  });

  it("refuses a body past the limit with a 413 problem and leaves no file", async () => {
    await assert.rejects(
      spoolBody(pieces(10, 64 * 1024), { dir, limitBytes: 5 * 64 * 1024 + 1 }),
      (error: unknown) => error instanceof ProblemError && error.status === 413,
    );
    assert.deepEqual(await readdir(dir), []);
  });

  it("leaves no file when the body stops half way (the client went away)", async () => {
    async function* broken(): AsyncGenerator<Uint8Array> {
      yield randomBytes(1000);
      throw new Error("aborted");
    }
    await assert.rejects(spoolBody(broken(), { dir, limitBytes: 1024 * 1024 }), /aborted/);
    assert.deepEqual(await readdir(dir), []);
  });
});
