import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ensureProject } from "../../server/store/mod.ts";
import { markDescendantsRevoked, selectTokenStandings } from "../../server/store/token_standing.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

for (const engine of await engines()) {
  describe(`token standing up the minting chain (${engine})`, () => {
    let t: TestStore;
    before(async () => {
      t = await openTestStore(engine);
      await ensureProject(t.store.db, "p");
    });
    after(() => t?.close());

    /** Account `id` with token `tok_<id>`, minted by `parent`. */
    async function account(id: string, parent: string | null, revokedAt: number | null = null): Promise<void> {
      await t.store.db.insertInto("service_accounts").values({
        id,
        project_id: "p",
        name: id,
        scopes: "run",
        token_id: `tok_${id}`,
        created_at: 1,
        expires_at: 2,
        revoked_at: revokedAt,
        parent_id: parent,
      }).execute();
    }

    async function standing(...ids: string[]) {
      const found = await selectTokenStandings(t.store.db, ids.map((id) => `tok_${id}`));
      return Object.fromEntries(ids.map((id) => [id, found.get(`tok_${id}`)?.revoked_at]));
    }

    it("answers each token's account and the first revocation up its chain, one token or many", async () => {
      await account("root", null);
      await account("child", "root");
      await account("grandchild", "child");
      await account("revoked-mid", "root", 500);
      await account("under-revoked", "revoked-mid");
      await account("own-first", "revoked-mid", 300);
      const one = await selectTokenStandings(t.store.db, ["tok_grandchild"]);
      assert.deepEqual([...one.values()], [{ token_id: "tok_grandchild", id: "grandchild", revoked_at: null }]);
      assert.deepEqual(await standing("root", "child", "grandchild", "revoked-mid", "under-revoked", "own-first"), {
        root: null,
        child: null,
        grandchild: null,
        "revoked-mid": 500,
        "under-revoked": 500,
        "own-first": 300,
      });
      assert.deepEqual(await standing("under-revoked"), { "under-revoked": 500 }, "the one-token statement too");
    });

    it("leaves out a token with no account, or whose chain is broken", async () => {
      await account("orphan", "sa_never_made");
      assert.deepEqual(await standing("orphan", "unknown"), { orphan: undefined, unknown: undefined });
      assert.deepEqual(await standing("orphan"), { orphan: undefined });
    });

    it("marks what an account minted, and what that minted, revoked; nothing else", async () => {
      await account("top", null);
      await account("a", "top");
      await account("a1", "a");
      await account("a11", "a1", 100);
      await account("b", "top");
      await markDescendantsRevoked(t.store.db, { id: "a", now: 700 });
      const rows = await t.store.db.selectFrom("service_accounts").select(["id", "revoked_at"])
        .where("id", "in", ["top", "a", "a1", "a11", "b"]).orderBy("id").execute();
      assert.deepEqual(Object.fromEntries(rows.map((r) => [r.id, r.revoked_at])), {
        a: null, // its own revocation is the caller's
        a1: 700,
        a11: 100, // revoked before: kept
        b: null,
        top: null,
      });
    });
  });
}
