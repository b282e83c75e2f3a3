/**
 * The collection a server makes once its apps have loaded (server/start_garbage.ts): it shrinks a young
 * generation that starting grew, and a started server makes it. What it saves in RSS is measured by
 * `npm run bench` (its idle server row), not here.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { getHeapSpaceStatistics } from "node:v8";
import { createLogger } from "../../server/log.ts";
import { releaseStartGarbage } from "../../server/start_garbage.ts";
import { waitFor } from "../_helpers/apps.ts";
import { makeServerDirs, type ServerDirs, startServerProcess } from "../_helpers/server_process.ts";

/** The young generation's committed size, in bytes. */
function youngGeneration(): number {
  return getHeapSpaceStatistics().find((space) => space.space_name === "new_space")!.space_size;
}

/** Allocates as a server's start does: fast, with much of it surviving a scavenge or two. */
function growYoungGeneration(): void {
  let kept: Array<{ n: number; s: string }> = [];
  for (let round = 0; round < 20; round++) {
    for (let i = 0; i < 200_000; i++) kept.push({ n: i, s: String(i) });
    if (kept.length > 1_000_000) kept = [];
  }
}

describe("the start's garbage", () => {
  let dirs: ServerDirs | undefined;
  after(() => dirs?.remove());

  it("is collected with the young generation shrunk back", async () => {
    growYoungGeneration();
    const grown = youngGeneration();
    await releaseStartGarbage({ logger: createLogger({ level: "silent" }) });
    assert.ok(youngGeneration() < grown, `the young generation stayed at ${grown} bytes`);
  });

  it("is collected by a server once its apps have loaded", async () => {
    dirs = await makeServerDirs("runplane-start-garbage-");
    const server = await startServerProcess({ ...dirs.env, RUNPLANE_LOG_LEVEL: "debug" });
    try {
      await waitFor(() => server.logs.some((entry) => entry.msg === "released the start's garbage"), "the collection");
      const entry = server.logs.find((entry) => entry.msg === "released the start's garbage")!;
      assert.equal(typeof entry.rss_before_mib, "number");
      assert.equal(typeof entry.rss_after_mib, "number");
    } finally {
      await server.kill();
    }
  });
});
