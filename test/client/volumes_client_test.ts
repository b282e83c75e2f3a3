/**
 * `client.volumes` of `@runplane/client` (issue 48's calls on the published client): a volume made,
 * listed, a file uploaded from a stream and downloaded as one, listed and stat-ed, deleted; a refusal is a
 * `RunplaneError` with the problem document; the client's `fetch` option carries every call (here one that
 * checks each answer against the contract).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { isRunplaneError } from "../../client/mod.ts";
import { createCheckedRunplaneClient } from "../_helpers/runplane_client.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

async function* chunks(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  for (let i = 0; i < bytes.length; i += 64 * 1024) yield bytes.subarray(i, i + 64 * 1024);
}

describe("client.volumes", () => {
  let t: TestServer;

  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_VOLUMES_MODE: "directory" } });
  });
  after(() => t?.close());

  it("makes a volume, uploads and downloads a file as streams, lists it, and deletes both", async () => {
    const { token } = await t.mintToken({ scopes: ["deploy", "rest"] });
    const { volumes } = createCheckedRunplaneClient(t.url, token);
    const made = await volumes.create(TEST_PROJECT, "weights", 0.0625);
    assert.equal(made.created, true);
    assert.equal(made.volume.name, "weights");
    assert.deepEqual((await volumes.list(TEST_PROJECT)).map((v) => v.name), ["weights"]);

    const bytes = new Uint8Array(300 * 1024).map((_, i) => i % 251);
    const sha256 = createHash("sha256").update(bytes).digest("hex");
    const written = await volumes.upload(TEST_PROJECT, "weights", {
      path: "models/w.bin",
      size: bytes.length,
      body: chunks(bytes),
    });
    assert.deepEqual(written, { path: "models/w.bin", size: bytes.length, sha256 });

    const listed = [];
    for await (const file of volumes.files(TEST_PROJECT, "weights", "models/")) listed.push(file.path);
    assert.deepEqual(listed, ["models/w.bin"]);
    assert.equal((await volumes.stat(TEST_PROJECT, "weights", "models/w.bin"))?.sha256, sha256);

    const download = await volumes.download(TEST_PROJECT, "weights", "models/w.bin");
    const received: Uint8Array[] = [];
    for await (const chunk of download.body) received.push(chunk);
    assert.deepEqual(Buffer.concat(received), Buffer.from(bytes));
    assert.equal(download.size, bytes.length);

    await volumes.deleteFile(TEST_PROJECT, "weights", "models/w.bin");
    assert.equal(await volumes.stat(TEST_PROJECT, "weights", "models/w.bin"), undefined);
    await volumes.delete(TEST_PROJECT, "weights");
    assert.deepEqual(await volumes.list(TEST_PROJECT), []);
  });

  it("rejects with a RunplaneError carrying the problem: another project's volume, a missing file", async () => {
    const { token } = await t.mintToken({ scopes: ["deploy", "rest"] });
    const { volumes } = createCheckedRunplaneClient(t.url, token);
    await assert.rejects(volumes.list("p-other"), (error: unknown) => isRunplaneError(error) && error.status === 403);
    await volumes.create(TEST_PROJECT, "empty", 0.0625);
    await assert.rejects(
      volumes.download(TEST_PROJECT, "empty", "nothing.bin"),
      (error: unknown) => isRunplaneError(error) && error.status === 404,
    );
  });
});
