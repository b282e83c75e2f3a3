import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import {
  BUNDLE_CHUNK_BYTES,
  type BundleSource,
  insertDeployment,
  selectBundle,
} from "../../server/deployments/_records.ts";
import { timeOrderedId } from "../../server/random/mod.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

function digestOf(bytes: Uint8Array): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

/** A source that hands out its chunks through one reused buffer, as a file's reader does. */
function reusedBufferSource(bytes: Buffer): BundleSource {
  async function* chunks(): AsyncGenerator<Uint8Array> {
    const buffer = Buffer.alloc(BUNDLE_CHUNK_BYTES);
    for (let at = 0; at < bytes.length; at += BUNDLE_CHUNK_BYTES) {
      const n = bytes.copy(buffer, 0, at, at + BUNDLE_CHUNK_BYTES);
      yield buffer.subarray(0, n);
    }
  }
  return { digest: digestOf(bytes), size: bytes.length, chunks };
}

async function readAll(chunks: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of chunks) parts.push(Buffer.from(chunk));
  return Buffer.concat(parts);
}

for (const engine of await engines()) {
  describe(`bundles kept in chunks (${engine})`, () => {
    let t: TestStore;
    before(async () => {
      t = await openTestStore(engine);
    });
    after(() => t?.close());

    function deploy(bundle: BundleSource, appId: string) {
      return insertDeployment(t.store.db, {
        deploymentId: timeOrderedId("dep_"),
        projectId: "p-chunks",
        appId,
        bundle,
        source: "bundle",
        now: Date.now(),
      });
    }

    it("stores a bundle as rows of at most BUNDLE_CHUNK_BYTES and reads the same bytes back", async () => {
      const bytes = randomBytes(3 * BUNDLE_CHUNK_BYTES + 1234);
      const row = await deploy(reusedBufferSource(bytes), "a");
      assert.equal(Number(row.size_bytes), bytes.length);
      const rows = await t.store.db.selectFrom("bundle_chunks").select(["idx", "data"])
        .where("digest", "=", digestOf(bytes)).orderBy("idx").execute();
      assert.deepEqual(rows.map((r) => r.idx), [0, 1, 2, 3]);
      assert.ok(rows.every((r) => r.data.byteLength <= BUNDLE_CHUNK_BYTES));
      const stored = await selectBundle(t.store.db, digestOf(bytes));
      assert.ok(stored);
      assert.equal(stored.size, bytes.length);
      assert.ok((await readAll(stored.chunks)).equals(bytes));
    });

    it("stores the same bytes once, however often they are deployed", async () => {
      const bytes = randomBytes(BUNDLE_CHUNK_BYTES + 1);
      await deploy(reusedBufferSource(bytes), "b");
      await deploy(reusedBufferSource(bytes), "c");
      const count = await t.store.db.selectFrom("bundle_chunks").select((eb) => eb.fn.countAll<number>().as("n"))
        .where("digest", "=", digestOf(bytes)).executeTakeFirstOrThrow();
      assert.equal(Number(count.n), 2);
    });

    it("reads a bundle stored before migration 0021 (its bytes in bundles.data)", async () => {
      const bytes = randomBytes(100_000);
      await t.store.db.insertInto("bundles").values({
        digest: digestOf(bytes),
        size_bytes: bytes.length,
        data: bytes,
        created_at: Date.now(),
        chunk_count: null,
      }).execute();
      const stored = await selectBundle(t.store.db, digestOf(bytes));
      assert.ok(stored);
      assert.ok((await readAll(stored.chunks)).equals(bytes));
    });

    it("answers undefined for a bundle that is not stored", async () => {
      assert.equal(await selectBundle(t.store.db, digestOf(randomBytes(8))), undefined);
    });
  });
}
