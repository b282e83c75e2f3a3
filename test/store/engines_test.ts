/**
 * The store on both engines: migrations, portable raw statements with `?` placeholders, bigint
 * parsing, constraint errors, the clock; and PostgreSQL's migration lock with ten openers at once.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type Kysely, sql } from "kysely";
import pg from "pg";
import { hashBaseImage } from "../../server/builds/mod.ts";
import { startDatabaseClock } from "../../server/store/clock.ts";
import { postgresPlaceholders } from "../../server/store/_placeholders.ts";
import { MIGRATIONS } from "../../server/store/_migrations/mod.ts";
import {
  type Database,
  ensureProject,
  isForeignKeyViolation,
  migrationsApplied,
  openStore,
  rawStatement,
  redactDatabaseUrl,
} from "../../server/store/mod.ts";
import { createTestDatabase, engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

describe("? placeholders for PostgreSQL", () => {
  it("numbers each placeholder in order, leaving quoted text and comments alone", () => {
    assert.equal(
      postgresPlaceholders(`select "a?" from "t" where x = ? and y = '?''?' and z in (?, ?) -- ?\n limit ? /* ? */`),
      `select "a?" from "t" where x = $1 and y = '?''?' and z in ($2, $3) -- ?\n limit $4 /* ? */`,
    );
    assert.equal(postgresPlaceholders(`select 1`), `select 1`);
  });
});

describe("database URLs in logs", () => {
  it("redacts the password, in the user part and as a parameter", () => {
    assert.equal(
      redactDatabaseUrl("postgres://rp:s3cret@db.example:5432/runplane?sslmode=require&password=again"),
      "postgres://rp:***@db.example:5432/runplane?sslmode=require&password=***",
    );
    assert.equal(redactDatabaseUrl("postgres://rp@db.example/runplane"), "postgres://rp@db.example/runplane");
  });
});

describe("the database clock", () => {
  it("follows the database's time even when the process's clock is an hour off", async () => {
    const skewMs = 3_600_000;
    const clock = await startDatabaseClock(() => Promise.resolve(Date.now()), {
      localNow: () => Date.now() - skewMs,
    });
    try {
      assert.ok(Math.abs(clock.now() - Date.now()) < 1000, `${clock.now()} vs ${Date.now()}`);
      assert.ok(Math.abs(clock.offsetMs - skewMs) < 1000);
      assert.ok(Number.isInteger(clock.now()), "whole milliseconds, for bigint columns");
    } finally {
      clock.stop();
    }
  });
});

for (const engine of await engines()) {
  describe(`the store (${engine})`, () => {
    let t: TestStore;
    before(async () => {
      t = await openTestStore(engine);
    });
    after(() => t?.close());

    it("creates the schema on first open and says so; every migration is applied", async () => {
      assert.equal(t.store.engine, engine);
      assert.equal(t.store.fresh, true);
      assert.equal(await migrationsApplied(t.store.db), true);
      const again = await openStore(t.dataDir, { databaseUrl: t.databaseUrl });
      try {
        assert.equal(again.fresh, false, "a second open finds the schema");
      } finally {
        await again.close();
      }
    });

    it("runs raw statements written with ? placeholders, even beside a quoted ?", async () => {
      const insert = rawStatement(`insert into "projects" ("id", "created_at") values (?, ?)`);
      await insert(t.store.db, ["p-raw", 1_700_000_000_123]);
      const select = rawStatement<{ id: string; created_at: number; mark: string }>(
        `select "id", "created_at", '?' as "mark" from "projects" where "id" = ? and "created_at" > ?`,
      );
      const { rows } = await select(t.store.db, ["p-raw", 0]);
      assert.deepEqual(rows, [{ id: "p-raw", created_at: 1_700_000_000_123, mark: "?" }]);
      await t.store.db.transaction().execute(async (trx) => {
        await insert(trx, ["p-raw-2", 5]);
      });
      assert.equal((await select(t.store.db, ["p-raw-2", 0])).rows.length, 1, "also inside a transaction");
    });

    it("returns bigint columns and counts as numbers", async () => {
      await ensureProject(t.store.db, "p-count");
      const row = await t.store.db.selectFrom("projects").select((eb) => eb.fn.countAll().as("n"))
        .executeTakeFirstOrThrow();
      assert.equal(typeof row.n, "number");
      const project = await t.store.db.selectFrom("projects").selectAll().where("id", "=", "p-count")
        .executeTakeFirstOrThrow();
      assert.equal(typeof project.created_at, "number");
      assert.ok(Math.abs(project.created_at - Date.now()) < 60_000);
    });

    it("recognises a foreign-key refusal, and a base-image hash creates its project after one", async () => {
      const error = await t.store.db.insertInto("service_accounts").values({
        id: "sa_x",
        project_id: "p-missing",
        name: "x",
        scopes: "rest",
        token_id: "tok_x",
        created_at: 1,
        expires_at: 2,
        revoked_at: null,
      }).execute().then(() => null, (e: unknown) => e);
      assert.ok(error, "the insert was refused");
      assert.equal(isForeignKeyViolation(error), true, String(error));
      assert.equal(isForeignKeyViolation(new Error("FOREIGN KEY")), false);
      // A digest of a project that exists only in a token's claims: the project is made, then the digest kept.
      const builds = { layersReady: () => Promise.resolve(false) };
      const request = { pipRequirements: ["x==1"] };
      const first = await hashBaseImage(t.store.db, { projectId: "p-new", request }, builds);
      await hashBaseImage(t.store.db, { projectId: "p-new", request }, builds);
      const kept = await t.store.db.selectFrom("base_image_digests").select(["digest", "seen_count"])
        .where("project_id", "=", "p-new").execute();
      assert.deepEqual(kept.map((row) => [row.digest, Number(row.seen_count)]), [[first.digest, 2]]);
    });

    it("has a clock in whole milliseconds that agrees with the database's", async () => {
      const now = t.store.clock.now();
      assert.ok(Number.isInteger(now));
      const databaseMs = engine === "postgres"
        ? Number(
          (await sql<{ now: number }>`select (extract(epoch from clock_timestamp()) * 1000)::float8 as now`
            .execute(t.store.db)).rows[0].now,
        )
        : Date.now();
      assert.ok(Math.abs(now - databaseMs) < 2000, `${now} vs ${databaseMs}`);
    });
  });
}

if ((await engines()).includes("postgres")) {
  describe("PostgreSQL migrations under the advisory lock", () => {
    it("ten stores opened at once on an empty database all open, and the schema is made once", async () => {
      const database = await createTestDatabase();
      const dir = await mkdtemp(join(tmpdir(), "runplane-ten-"));
      try {
        const stores = await Promise.all(
          Array.from({ length: 10 }, () => openStore(dir, { databaseUrl: database.url, poolSize: 2 })),
        );
        try {
          assert.equal(stores.filter((s) => s.fresh).length, 1, "one of them created the schema");
          for (const store of stores) assert.equal(await migrationsApplied(store.db), true);
        } finally {
          await Promise.all(stores.map((s) => s.close()));
        }
        const client = new pg.Client({ connectionString: database.url });
        await client.connect();
        try {
          const { rows } = await client.query(`select count(*)::int as n from "runplane_migrations"`);
          assert.equal(rows[0].n, Object.keys(MIGRATIONS).length);
        } finally {
          await client.end();
        }
      } finally {
        await database.drop();
        await rm(dir, { recursive: true, force: true });
      }
    });

    it("names the database by its URL with the password redacted", async () => {
      const database = await createTestDatabase();
      const dir = await mkdtemp(join(tmpdir(), "runplane-url-"));
      const url = new URL(database.url);
      url.password = "not-for-logs"; // trust auth ignores it
      try {
        const store = await openStore(dir, { databaseUrl: url.toString() });
        await store.close();
        assert.ok(store.path.includes(":***@"), store.path);
        assert.ok(!store.path.includes("not-for-logs"));
      } finally {
        await database.drop();
        await rm(dir, { recursive: true, force: true });
      }
    });

    it("runs portable raw statements as named prepared statements when asked, builder queries unnamed", async () => {
      const ask = rawStatement<{ n: number }>('select count(*) as n from "runs" where "status" = ?');
      const prepared = (db: Kysely<Database>) =>
        sql<{ name: string; statement: string }>`select name, statement from pg_prepared_statements
          where not from_sql order by name`.execute(db).then((r) => r.rows);
      // One connection, so that the session asked about is the one that ran the statements.
      const on = await openTestStore("postgres", { poolSize: 1, preparedStatements: true });
      try {
        for (let i = 0; i < 3; i++) assert.equal(Number((await ask(on.store.db, ["queued"])).rows[0].n), 0);
        await on.store.db.selectFrom("runs").select("run_id").where("status", "=", "queued").execute();
        const statements = await prepared(on.store.db);
        assert.equal(statements.length, 1, JSON.stringify(statements));
        assert.match(statements[0].name, /^runplane_\d+$/);
        assert.equal(statements[0].statement, `select count(*) as n from "runs" where "status" = $1`);
      } finally {
        await on.close();
      }
      const off = await openTestStore("postgres", { poolSize: 1 });
      try {
        await ask(off.store.db, ["queued"]);
        assert.deepEqual(await prepared(off.store.db), [], "the default (a CLI's) prepares nothing");
      } finally {
        await off.close();
      }
    });

    it("sets idle_in_transaction_session_timeout on the pool's sessions", async () => {
      const t = await openTestStore("postgres", { idleInTransactionTimeoutMs: 12_345 });
      try {
        const { rows } = await sql<{ v: string }>`select current_setting('idle_in_transaction_session_timeout') as v`
          .execute(t.store.db);
        assert.equal(rows[0].v, "12345ms");
      } finally {
        await t.close();
      }
    });
  });
}
