import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createSessionRecords } from "../../server/auth/mod.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

for (const engine of await engines()) {
  describe(`dashboard session records (${engine})`, () => {
    let t: TestStore;
    before(async () => (t = await openTestStore(engine)));
    after(() => t?.close());

    it("holds a session from start to end, and an end made by one process is seen by another", async () => {
      const here = createSessionRecords(t.store.db);
      const elsewhere = createSessionRecords(t.store.db);
      const id = await here.start({ serviceAccountId: "sa_x", expiresAt: Date.now() + 60_000 });
      const other = await here.start({ serviceAccountId: "sa_x", expiresAt: Date.now() + 60_000 });
      assert.notEqual(id, other);
      assert.deepEqual(await Promise.all([here.isLive(id), elsewhere.isLive(id), here.isLive(other)]), [
        true,
        true,
        true,
      ]);
      await elsewhere.end(id);
      assert.equal(await here.isLive(id), false);
      assert.equal(await here.isLive(other), true, "ending one session leaves the others");
      assert.equal(await here.isLive("ses_never_started"), false);
    });

    it("answers an expired session as ended, and drops expired ones at the next start", async () => {
      const records = createSessionRecords(t.store.db);
      const expired = await records.start({ serviceAccountId: "sa_x", expiresAt: Date.now() - 1 });
      assert.equal(await records.isLive(expired), false);
      await records.start({ serviceAccountId: "sa_x", expiresAt: Date.now() + 60_000 });
      const left = await t.store.db.selectFrom("dashboard_sessions").select("id").where("id", "=", expired).execute();
      assert.deepEqual(left, []);
    });
  });
}
