/**
 * The volumes API while its PostgreSQL is away: every operation answers 503 `store-unavailable` (never a
 * 500, nothing half done), and once the store is back the volume and its files answer as before.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { type OwnPostgres, ownPostgresMissing, startOwnPostgres } from "../_helpers/own_postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MISSING = await ownPostgresMissing();

describe("the volumes API while its PostgreSQL is away", { skip: MISSING ?? false }, () => {
  let postgres: OwnPostgres;
  let t: TestServer;
  let deploy: string;
  const base = `/v3/projects/${TEST_PROJECT}/volumes`;

  before(async () => {
    postgres = await startOwnPostgres();
    t = await startTestServer({ databaseUrl: postgres.url, env: { RUNPLANE_VOLUMES_MODE: "directory" } });
    deploy = (await t.mintToken({ scopes: ["deploy", "rest"] })).token;
  });
  after(async () => {
    await t?.close();
    await postgres?.remove();
  });

  function request(method: string, url: string, body?: { json?: unknown; bytes?: Uint8Array }) {
    const headers: Record<string, string> = { Authorization: `Bearer ${deploy}` };
    if (body?.json !== undefined) headers["Content-Type"] = "application/json";
    if (body?.bytes !== undefined) headers["Content-Type"] = "application/octet-stream";
    const payload = body?.json !== undefined ? JSON.stringify(body.json) : body?.bytes;
    return checkedFetch(`${t.url}${url}`, { method, headers, body: payload as BodyInit | undefined });
  }

  it("answers 503 store-unavailable for every operation, then serves the volume again", async () => {
    assert.equal((await request("PUT", `${base}/weights`, { json: { size_gb: 0.0625 } })).status, 201);
    assert.equal((await request("PUT", `${base}/weights/files/a.txt`, { bytes: Buffer.from("kept") })).status, 201);
    await postgres.stop();
    try {
      const calls: Array<[string, string, { json?: unknown; bytes?: Uint8Array }?]> = [
        ["GET", base],
        ["GET", `${base}/weights`],
        ["PUT", `${base}/other`, { json: { size_gb: 1 } }],
        ["DELETE", `${base}/weights`],
        ["PUT", `${base}/weights/files/b.txt`, { bytes: Buffer.from("new") }],
        ["GET", `${base}/weights/files/a.txt`],
        ["GET", `${base}/weights/files`],
        ["DELETE", `${base}/weights/files/a.txt`],
      ];
      for (const [method, url, body] of calls) {
        const answer = await request(method, url, body);
        assert.equal(answer.status, 503, `${method} ${url}`);
        const problem = (await answer.json()) as { type: string };
        assert.match(problem.type, /\/(store-unavailable|service-unavailable)$/, `${method} ${url}`);
      }
    } finally {
      await postgres.start();
    }
    await waitFor(
      async () => (await request("GET", `${base}/weights`)).status === 200,
      "the volume to answer again",
      60_000,
    );
    const file = await request("GET", `${base}/weights/files/a.txt`);
    assert.equal(await file.text(), "kept");
    const listed = await request("GET", `${base}/weights/files`);
    assert.deepEqual(((await listed.json()) as { files: Array<{ path: string }> }).files.map((f) => f.path), ["a.txt"]);
  });
});
