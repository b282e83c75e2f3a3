import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { sql } from "kysely";
import { startCheckpointer } from "../../server/store/checkpointer.ts";
import { openStore } from "../../server/store/mod.ts";

async function eventually(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("background WAL checkpoints", () => {
  it("copies committed pages into the database file from a worker, with the commit's own checkpoint off", async () => {
    const dir = mkdtempSync(join(tmpdir(), "runplane-checkpoint-"));
    const store = await openStore(dir, { checkpoints: "background" });
    try {
      await sql`create table filler (id integer primary key, data blob)`.execute(store.db);
      const before = statSync(store.path).size;
      // About 200 pages: far below SQLite's own threshold (1000), so only the worker checkpoints them.
      await store.db.transaction().execute(async (trx) => {
        for (let i = 0; i < 200; i++) await sql`insert into filler (data) values (randomblob(4000))`.execute(trx);
      });
      assert.equal(statSync(store.path).size, before, "the commit itself did not checkpoint");
      await eventually(
        () => statSync(store.path).size >= before + 200 * 4000,
        10_000,
        "the pages to reach the database file",
      );
    } finally {
      await store.close();
    }
    assert.equal(existsSync(`${store.path}-wal`), false, "a clean close leaves no WAL behind");
    rmSync(dir, { recursive: true, force: true });
  });

  it("reports a worker that cannot checkpoint, so the caller can switch the commit's checkpoint back on", async () => {
    // The worker does not hold the process open; the test's own deadline does.
    let deadline: NodeJS.Timeout | undefined;
    const lost = await new Promise<unknown>((resolve, reject) => {
      deadline = setTimeout(() => reject(new Error("onLost was not called")), 10_000);
      startCheckpointer(join(tmpdir(), "runplane-no-such-dir", "runplane.sqlite3"), { onLost: resolve });
    });
    clearTimeout(deadline);
    assert.match(String((lost as Error).message), /directory does not exist|unable to open/);
  });

  it("says when it checkpoints again after it failed, so the caller can switch the commit's checkpoint off again", async () => {
    const dir = join(mkdtempSync(join(tmpdir(), "runplane-checkpoint-back-")), "later");
    const said: string[] = [];
    const checkpointer = startCheckpointer(join(dir, "runplane.sqlite3"), {
      intervalMs: 50,
      onLost: () => said.push("lost"),
      onBack: () => said.push("back"),
    });
    try {
      await eventually(() => said.includes("lost"), 10_000, "the worker to fail (no database yet)");
      // The store comes back: the database is there now.
      const store = await openStore(dir, {});
      try {
        await eventually(() => said.includes("back"), 10_000, "the worker to say it is back");
        assert.deepEqual(said, ["lost", "back"], "each change told once");
      } finally {
        await store.close();
      }
    } finally {
      await checkpointer.stop();
      rmSync(join(dir, ".."), { recursive: true, force: true });
    }
  });
});
