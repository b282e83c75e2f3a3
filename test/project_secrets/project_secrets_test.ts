/**
 * The project secrets service on both engines, without HTTP: values sealed at rest and bound to their
 * project and name, names checked, limits held under concurrent calls, the fingerprint raised by every
 * change, and changes told to listeners of another store handle (as another process would be).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import {
  createProjectSecrets,
  PROJECT_SECRET_LIMITS,
  type ProjectSecrets,
  secretNameProblem,
} from "../../server/project_secrets/mod.ts";
import { isProblemError } from "../../server/problems/mod.ts";
import { createSecretBox, type SecretBox } from "../../server/secrets/mod.ts";
import { LISTENER_APPLICATION_NAME, openStore, type Store } from "../../server/store/mod.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

/** Records the project ids told to `secrets`' listeners; `next` resolves once `projectId` is told. */
function watchChanges(secrets: ProjectSecrets, projectId: string, timeoutMs = 5_000): {
  told: string[];
  next: Promise<void>;
  stop(): void;
} {
  const told: string[] = [];
  let seen = () => {};
  const stop = secrets.onChange((id) => {
    told.push(id);
    if (id === projectId) seen();
  });
  const next = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${projectId} not told within ${timeoutMs} ms`)), timeoutMs);
    seen = () => {
      clearTimeout(timer);
      resolve();
    };
  });
  return { told, next, stop };
}

async function rejectsWith(promise: Promise<unknown>, status: number, detail: RegExp): Promise<void> {
  await assert.rejects(promise, (error) => {
    assert.ok(isProblemError(error), String(error));
    assert.equal(error.status, status);
    assert.match(error.message, detail);
    return true;
  });
}

for (const engine of await engines()) {
  describe(`project secrets (${engine})`, () => {
    let t: TestStore;
    let other: Store;
    let box: SecretBox;
    let secrets: ProjectSecrets;
    let elsewhere: ProjectSecrets;

    before(async () => {
      t = await openTestStore(engine);
      other = await openStore(t.dataDir, { databaseUrl: t.databaseUrl, migrate: false });
      box = createSecretBox(randomBytes(32));
      secrets = createProjectSecrets({ db: t.store.db, secrets: box, notifier: t.store.notifier, now: Date.now });
      elsewhere = createProjectSecrets({ db: other.db, secrets: box, notifier: other.notifier, now: Date.now });
    });
    after(async () => {
      await other?.close();
      await t?.close();
    });

    it("sets, lists, replaces and deletes, and gives the values only as the project's environment", async () => {
      assert.deepEqual(await secrets.list("p-a"), []);
      assert.deepEqual(await secrets.environment("p-a"), {});
      const first = await secrets.put("p-a", "API_KEY", "k1");
      assert.equal(first.created, true);
      assert.equal(first.secret.name, "API_KEY");
      const replaced = await secrets.put("p-a", "API_KEY", "k2");
      assert.equal(replaced.created, false);
      assert.equal(replaced.secret.createdAt, first.secret.createdAt);
      await secrets.put("p-a", "_db_url", "postgres://u:p@h/db\nsecond line ✓");
      await secrets.put("p-a", "EMPTY", "");
      await secrets.put("p-b", "API_KEY", "other project");
      const listed = await secrets.list("p-a");
      assert.deepEqual(listed.map((s) => s.name), ["API_KEY", "EMPTY", "_db_url"]);
      assert.ok(listed.every((s) => !Number.isNaN(Date.parse(s.createdAt)) && s.updatedAt >= s.createdAt));
      assert.ok(!JSON.stringify(listed).includes("k2"), "a list never holds a value");
      assert.deepEqual(await secrets.environment("p-a"), {
        API_KEY: "k2",
        EMPTY: "",
        _db_url: "postgres://u:p@h/db\nsecond line ✓",
      });
      assert.deepEqual(await secrets.environment("p-b"), { API_KEY: "other project" });
      assert.equal(await secrets.delete("p-a", "EMPTY"), true);
      assert.equal(await secrets.delete("p-a", "EMPTY"), false);
      assert.equal(await secrets.delete("p-none", "API_KEY"), false);
      assert.deepEqual(Object.keys(await secrets.environment("p-a")), ["API_KEY", "_db_url"]);
    });

    it("keeps only sealed values in the store", async () => {
      const value = `plain-${randomBytes(8).toString("hex")}`;
      await secrets.put("p-sealed", "TOKEN", value);
      const rows = await t.store.db.selectFrom("project_secrets").selectAll().where("project_id", "=", "p-sealed")
        .execute();
      assert.equal(rows.length, 1);
      const raw = JSON.stringify(rows);
      assert.ok(!raw.includes(value), raw);
      assert.ok(!raw.includes(Buffer.from(value).toString("base64")), "not merely encoded");
      assert.match(rows[0].value_sealed, /^v1\./);
      assert.equal(Number(rows[0].value_bytes), value.length);
    });

    it("refuses a sealed value moved to another secret's row", async () => {
      await secrets.put("p-moved", "A", "value of A");
      await secrets.put("p-victim", "A", "victim's");
      const { value_sealed } = await t.store.db.selectFrom("project_secrets").select("value_sealed")
        .where("project_id", "=", "p-moved").where("name", "=", "A").executeTakeFirstOrThrow();
      await t.store.db.updateTable("project_secrets").set({ value_sealed }).where("project_id", "=", "p-victim")
        .execute();
      await assert.rejects(secrets.environment("p-victim"), /secret A of project p-victim was sealed for another/);
      const foreign = createProjectSecrets({
        db: t.store.db,
        secrets: createSecretBox(randomBytes(32)),
        notifier: t.store.notifier,
        now: Date.now,
      });
      await assert.rejects(foreign.environment("p-moved"), /does not open with this store's data key/);
    });

    it("refuses names that are not environment variables' and the platform's RUNPLANE_ ones", async () => {
      for (const name of ["1ABC", "A-B", "RUNPLANE_X", "", "A B", "É", "a".repeat(129)]) {
        assert.ok(secretNameProblem(name), name);
        await rejectsWith(secrets.put("p-names", name, "v"), 400, /The secret name/);
        await rejectsWith(secrets.delete("p-names", name), 400, /The secret name/);
      }
      await rejectsWith(secrets.put("p-names", "RUNPLANE_TOKEN", "v"), 400, /RUNPLANE_, which the platform/);
      for (const name of ["A", "_", "a1", "runplane_mine", "A".repeat(128)]) {
        assert.equal(secretNameProblem(name), null);
      }
      await rejectsWith(secrets.put("p-names", "NUL", "a\u0000b"), 400, /NUL/);
      assert.deepEqual(await secrets.list("p-names"), []);
    });

    it("refuses a value over 64 KiB and a project total over 1 MiB, naming the limit", async () => {
      const big = "x".repeat(PROJECT_SECRET_LIMITS.valueBytes);
      await secrets.put("p-size", "BIG_0", big);
      await rejectsWith(secrets.put("p-size", "TOO_BIG", `${big}y`), 413, /65537 bytes; the limit is 65536 bytes/);
      // Multi-byte characters count as their UTF-8 bytes.
      await rejectsWith(secrets.put("p-size", "TOO_BIG", "é".repeat(32769)), 413, /the limit is 65536 bytes/);
      const count = PROJECT_SECRET_LIMITS.totalBytes / PROJECT_SECRET_LIMITS.valueBytes;
      for (let i = 1; i < count; i++) await secrets.put("p-size", `BIG_${i}`, big);
      await rejectsWith(secrets.put("p-size", "ONE_MORE", "z"), 413, /total 1048577 bytes; the limit is 1048576/);
      // Replacing a value counts the new size, not both.
      await secrets.put("p-size", "BIG_0", "small");
      await secrets.put("p-size", "ONE_MORE", "z");
    });

    it("holds 100 secrets per project under concurrent calls, naming the limit", async () => {
      for (let i = 0; i < PROJECT_SECRET_LIMITS.secrets - 5; i++) await secrets.put("p-count", `S_${i}`, "v");
      // On PostgreSQL through two handles (two pools, as two processes); SQLite has one writer per process.
      const handles = engine === "postgres" ? [secrets, elsewhere] : [secrets];
      const outcomes = await Promise.allSettled(
        Array.from({ length: 10 }, (_, i) => handles[i % handles.length].put("p-count", `NEW_${i}`, "v")),
      );
      const refused = outcomes.filter((o) => o.status === "rejected");
      assert.equal(outcomes.length - refused.length, 5);
      for (const outcome of refused) {
        const error = (outcome as PromiseRejectedResult).reason;
        assert.ok(isProblemError(error), String(error));
        assert.equal(error.status, 409);
        assert.match(error.message, /has 100 secrets; the limit is 100 per project/);
      }
      assert.equal((await secrets.list("p-count")).length, PROJECT_SECRET_LIMITS.secrets);
      // Replacing one at the limit is not one more.
      assert.equal((await secrets.put("p-count", "S_0", "w")).created, false);
    });

    it("changes the fingerprint with every change, and only then", async () => {
      const start = await secrets.fingerprint("p-print");
      await secrets.put("p-print", "A", "1");
      const afterPut = await secrets.fingerprint("p-print");
      assert.notEqual(afterPut, start);
      assert.equal(await elsewhere.fingerprint("p-print"), afterPut, "every handle reads the same");
      await secrets.put("p-print", "A", "1");
      const afterSame = await secrets.fingerprint("p-print");
      assert.notEqual(afterSame, afterPut, "setting a value again is a change");
      assert.equal(await secrets.delete("p-print", "MISSING"), false);
      await rejectsWith(secrets.put("p-print", "B", "x".repeat(70_000)), 413, /limit/);
      assert.equal(await secrets.fingerprint("p-print"), afterSame, "refused and empty calls change nothing");
      await secrets.delete("p-print", "A");
      assert.notEqual(await secrets.fingerprint("p-print"), afterSame);
      assert.notEqual(await secrets.fingerprint("p-print"), start, "deleting the last secret is a change too");
    });

    it("tells listeners of this handle once, and of another handle, of a change", async () => {
      // SQLite delivers wake-ups on a later turn of the event loop: let the earlier tests' ones go by.
      await new Promise((resolve) => setTimeout(resolve, 50));
      const here = watchChanges(secrets, "p-told");
      const there = watchChanges(elsewhere, "p-told");
      try {
        await other.notifier.listening();
        await t.store.notifier.listening();
        await secrets.put("p-told", "A", "1");
        await here.next;
        await there.next;
        await new Promise((resolve) => setTimeout(resolve, 200));
        assert.deepEqual(here.told, ["p-told"], "its own change is not told again by the echo");
        assert.deepEqual(there.told, ["p-told"]);
      } finally {
        here.stop();
        there.stop();
      }
      const deleted = watchChanges(secrets, "p-told");
      try {
        await elsewhere.delete("p-told", "A");
        await deleted.next;
      } finally {
        deleted.stop();
      }
    });

    it("stops telling a listener once unsubscribed, and a throwing listener does not stop the others", async () => {
      const told: string[] = [];
      const errors: unknown[] = [];
      const own = createProjectSecrets({
        db: t.store.db,
        secrets: box,
        notifier: t.store.notifier,
        now: Date.now,
        onError: (error) => errors.push(error),
      });
      const stopThrowing = own.onChange(() => {
        throw new Error("listener failed");
      });
      const stop = own.onChange((projectId) => told.push(projectId));
      await own.put("p-listen", "A", "1");
      stop();
      stopThrowing();
      await own.put("p-listen", "A", "2");
      assert.deepEqual(told, ["p-listen"]);
      assert.equal(errors.length, 1);
    });

    if (engine === "postgres") {
      it("tells every project with secrets after the listening connection was lost", async () => {
        const told = new Set<string>();
        const stop = elsewhere.onChange((projectId) => told.add(projectId));
        try {
          await other.notifier.listening();
          const client = new pg.Client({ connectionString: t.databaseUrl! });
          await client.connect();
          try {
            await client.query(
              "select pg_terminate_backend(pid) from pg_stat_activity where application_name = $1 and datname = current_database()",
              [LISTENER_APPLICATION_NAME],
            );
          } finally {
            await client.end();
          }
          const deadline = Date.now() + 10_000;
          while (!told.has("p-a") && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
          assert.ok(told.has("p-a") && told.has("p-print"), [...told].join(", "));
        } finally {
          stop();
        }
      });
    }
  });
}
