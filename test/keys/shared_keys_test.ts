import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { decodeProtectedHeader } from "jose";
import { createServiceAccount, revokeServiceAccount } from "../../server/auth/mod.ts";
import { ConfigError, loadConfig } from "../../server/config.ts";
import { keysBootstrap, loadKeys, parseMasterKey } from "../../server/keys/mod.ts";
import { createLogger } from "../../server/log.ts";
import { createServer } from "../../server/mod.ts";
import { openStore } from "../../server/store/mod.ts";
import { runCli, runMain } from "../_helpers/cli.ts";
import { createTestClient } from "../_helpers/client.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const POSTGRES = (await engines()).includes("postgres");

/** A call that needs a `rest` token of `p-test`: 200 when the token is accepted. */
async function statusWith(url: string, token: string): Promise<number> {
  const { response } = await createTestClient(url, token).POST(
    "/v3/projects/{project_id}/apps/{app_id}/base-image",
    { params: { path: { project_id: TEST_PROJECT, app_id: "a" } }, body: {} },
  );
  return response.status;
}

async function jwksKids(url: string): Promise<string[]> {
  const response = await fetch(`${url}/.well-known/jwks.json`);
  assert.equal(response.status, 200);
  const body = (await response.json()) as { keys: Array<{ kid: string; d?: string }> };
  for (const key of body.keys) assert.equal(key.d, undefined, "a JWKS never carries a private member");
  return body.keys.map((key) => key.kid).sort();
}

async function keyRows(url: string) {
  const store = await openStore("/nonexistent", { databaseUrl: url, migrate: false });
  try {
    return await store.db.selectFrom("keys").selectAll().orderBy("created_at").execute();
  } finally {
    await store.close();
  }
}

describe("shared keys on PostgreSQL: two servers, one database, one master key", { skip: !POSTGRES }, () => {
  const masterKey = randomBytes(32).toString("base64");
  let database: TestDatabase;
  let a: TestServer;
  let b: TestServer;
  before(async () => {
    database = await createTestDatabase();
    const env = { RUNPLANE_MASTER_KEY: masterKey };
    a = await startTestServer({ databaseUrl: database.url, env });
    b = await startTestServer({ databaseUrl: database.url, env });
  });
  after(async () => {
    await a?.close();
    await b?.close();
    await database?.drop();
  });

  it("keeps one signing and one data key in the database, sealed, and no key files in either data dir", async () => {
    const rows = await keyRows(database.url);
    assert.deepEqual(rows.map((row) => row.purpose).sort(), ["data", "signing"]);
    for (const row of rows) {
      assert.match(row.sealed, /^v1\./);
      assert.equal(row.retired_at, null);
      assert.ok(!row.sealed.includes(masterKey));
    }
    // The data key's plaintext (base64 of 32 bytes) is not in its row.
    assert.ok(!rows.some((row) => /^[A-Za-z0-9+/]{43}=$/.test(row.sealed)));
    for (const dir of [a.dataDir, b.dataDir]) {
      assert.equal(existsSync(join(dir, "keys", "signing_key.jwk.json")), false);
      assert.equal(existsSync(join(dir, "keys", "secret_box.key")), false);
    }
  });

  it("accepts on B a token minted through A, and on A one minted through B, each naming its key's kid", async () => {
    assert.equal(await statusWith(b.url, a.token), 200);
    assert.equal(await statusWith(a.url, b.token), 200);
    assert.equal(decodeProtectedHeader(a.token).kid, a.server.context.key.kid);
    assert.equal(a.server.context.key.kid, b.server.context.key.kid);
  });

  it("accepts on both a token made by the CLI against the database", async () => {
    const { code, stdout, stderr } = await runMain(
      ["service-account", "create", "--project", TEST_PROJECT, "--name", "cli", "--expires", "1d", "--json"],
      { env: { RUNPLANE_DATABASE_URL: database.url, RUNPLANE_MASTER_KEY: masterKey } },
    );
    assert.equal(code, 0, stderr);
    const { token } = JSON.parse(stdout) as { token: string };
    assert.equal(await statusWith(a.url, token), 200);
    assert.equal(await statusWith(b.url, token), 200);
  });

  it("opens on B a secret sealed on A, and the other way round", () => {
    const sealedOnA = a.server.context.secrets.seal("whsec-from-a");
    assert.equal(b.server.context.secrets.open(sealedOnA), "whsec-from-a");
    const sealedOnB = b.server.context.secrets.seal("ghp_from_b");
    assert.equal(a.server.context.secrets.open(sealedOnB), "ghp_from_b");
  });

  it("serves the same JWKS on both, listing the database's signing key", async () => {
    const signing = (await keyRows(database.url)).filter((row) => row.purpose === "signing").map((row) => row.kid);
    assert.deepEqual(await jwksKids(a.url), signing);
    assert.deepEqual(await jwksKids(b.url), signing);
  });

  it("never logs the master key", () => {
    for (const t of [a, b]) {
      const logs = t.rawLogs();
      assert.ok(logs.length > 0);
      assert.ok(!logs.includes(masterKey));
      assert.ok(!logs.includes(Buffer.from(masterKey, "base64").toString("hex")));
    }
    assert.equal(JSON.stringify(a.server.context.config.masterKey), '"[redacted]"');
  });
});

describe("shared keys: start-up", { skip: !POSTGRES }, () => {
  let database: TestDatabase;
  let dataDir: string;
  before(async () => {
    database = await createTestDatabase();
    dataDir = await mkdtemp(join(tmpdir(), "runplane-keys-"));
  });
  after(async () => {
    await database?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it("creates exactly one signing and one data key when ten stores bootstrap at once", async () => {
    const masterKey = parseMasterKey(randomBytes(32).toString("base64"));
    const stores = await Promise.all(
      Array.from(
        { length: 10 },
        () => openStore(dataDir, { databaseUrl: database.url, poolSize: 2, bootstrap: keysBootstrap(masterKey) }),
      ),
    );
    try {
      const keys = await Promise.all(stores.map((store) => loadKeys(store, { dataDir, masterKey })));
      const rows = await stores[0].db.selectFrom("keys").select(["purpose"]).execute();
      assert.deepEqual(rows.map((row) => row.purpose).sort(), ["data", "signing"]);
      assert.equal(new Set(keys.map((k) => k.signing.current.kid)).size, 1);
      const sealed = keys[3].secrets.seal("one box for all");
      for (const k of keys) assert.equal(k.secrets.open(sealed), "one box for all");
    } finally {
      await Promise.all(stores.map((store) => store.close()));
    }
  });

  it("refuses to start without a master key, saying how to make one (exit 2)", async () => {
    assert.throws(
      () => loadConfig({ RUNPLANE_DATA_DIR: dataDir, RUNPLANE_DATABASE_URL: database.url }),
      (error: unknown) =>
        error instanceof ConfigError && /RUNPLANE_MASTER_KEY is not set/.test(error.message)
        && error.message.includes("openssl rand -base64 32")
        && error.message.includes("crypto.randomBytes(32).toString('base64')"),
    );
    const outcome = await runCli(["serve"], {
      env: { RUNPLANE_DATA_DIR: dataDir, RUNPLANE_DATABASE_URL: database.url, PORT: "0" },
    });
    assert.equal(outcome.code, 2, outcome.stderr);
    assert.match(outcome.stderr, /RUNPLANE_MASTER_KEY is not set.*openssl rand -base64 32/);
  });

  it("refuses a malformed master key without repeating it", () => {
    for (const malformed of ["hunter2-is-not-32-bytes", randomBytes(16).toString("base64"), "not base64!!"]) {
      assert.throws(
        () =>
          loadConfig({
            RUNPLANE_DATA_DIR: dataDir,
            RUNPLANE_DATABASE_URL: database.url,
            RUNPLANE_MASTER_KEY: malformed,
          }),
        (error: unknown) =>
          error instanceof ConfigError && /RUNPLANE_MASTER_KEY="\*\*\*": must be 32 random bytes in base64/.test(
            error.message,
          ) && error.message.includes("openssl rand -base64 32") && !error.message.includes(malformed),
      );
    }
  });

  it("refuses a master key that does not open the database's keys (exit 2), never printing either key", async () => {
    const right = randomBytes(32).toString("base64");
    const wrong = randomBytes(32).toString("base64");
    const first = await startTestServer({ engine: "postgres", env: { RUNPLANE_MASTER_KEY: right } });
    const databaseUrl = first.databaseUrl!;
    await first.server.close();
    try {
      const config = loadConfig({
        RUNPLANE_DATA_DIR: dataDir,
        RUNPLANE_APPS_DIR: dataDir,
        RUNPLANE_DATABASE_URL: databaseUrl,
        RUNPLANE_MASTER_KEY: wrong,
        PORT: "0",
      });
      await assert.rejects(
        createServer(config, { logger: createLogger({ level: "silent" }) }),
        (error: unknown) =>
          error instanceof ConfigError
          && /RUNPLANE_MASTER_KEY does not open the keys in the database/.test(error.message),
      );
      const outcome = await runCli(["serve"], {
        env: { RUNPLANE_DATA_DIR: dataDir, RUNPLANE_DATABASE_URL: databaseUrl, RUNPLANE_MASTER_KEY: wrong, PORT: "0" },
      });
      assert.equal(outcome.code, 2, outcome.stderr);
      assert.match(outcome.stderr, /RUNPLANE_MASTER_KEY does not open the keys in the database/);
      for (const key of [right, wrong]) assert.ok(!`${outcome.stdout}${outcome.stderr}`.includes(key));
    } finally {
      await first.close();
    }
  });

  it("lets the CLI refuse --database-url without a master key, saying how to make one", async () => {
    const { code, stderr } = await runMain(
      ["service-account", "create", "--project", TEST_PROJECT, "--name", "x", "--expires", "1d"],
      { env: { RUNPLANE_DATABASE_URL: database.url } },
    );
    assert.equal(code, 2);
    assert.match(stderr, /RUNPLANE_MASTER_KEY is not set.*openssl rand -base64 32/);
  });
});

describe("shared keys: a retired signing key", { skip: !POSTGRES }, () => {
  let database: TestDatabase;
  let dataDir: string;
  before(async () => {
    database = await createTestDatabase();
    dataDir = await mkdtemp(join(tmpdir(), "runplane-keys-"));
  });
  after(async () => {
    await database?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it("stays in the JWKS and verifies its tokens while one may be live; the newest key signs", async () => {
    const env = { RUNPLANE_MASTER_KEY: randomBytes(32).toString("base64") };
    const old = await startTestServer({ databaseUrl: database.url, env });
    const oldKid = old.server.context.key.kid;
    const oldToken = old.token;
    const oldAccount = (await old.server.context.store.db.selectFrom("service_accounts").select("id").execute())[0].id;
    await old.close();
    // A rotation, by hand: retire the signing key; the next bootstrap makes a new one.
    const store = await openStore(dataDir, { databaseUrl: database.url });
    await store.db.updateTable("keys").set({ retired_at: Date.now() }).where("purpose", "=", "signing").execute();
    await store.close();
    const rotated = await startTestServer({ databaseUrl: database.url, env });
    try {
      const newKid = rotated.server.context.key.kid;
      assert.notEqual(newKid, oldKid);
      assert.equal(decodeProtectedHeader(rotated.token).kid, newKid);
      assert.deepEqual(await jwksKids(rotated.url), [oldKid, newKid].sort());
      assert.equal(await statusWith(rotated.url, oldToken), 200);
      assert.equal(await statusWith(rotated.url, rotated.token), 200);
      // Once no token it signed can be live, the retired key leaves the JWKS.
      await revokeServiceAccount(rotated.server.context.store.db, oldAccount);
      assert.deepEqual(await jwksKids(rotated.url), [newKid]);
      // A token minted now is signed with the new key.
      const { token } = await createServiceAccount(
        { db: rotated.server.context.store.db, key: rotated.server.context.key },
        { projectId: TEST_PROJECT, name: "after", scopes: ["rest"], expiresAt: Date.now() + 60_000 },
      );
      assert.equal(decodeProtectedHeader(token).kid, newKid);
    } finally {
      await rotated.close();
    }
  });
});

describe("shared keys on SQLite: the key files of the data dir, as before", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
  });
  after(() => t.close());

  it("keeps the signing and data keys in the data dir and none in the database, without a master key", async () => {
    assert.equal(t.server.context.config.masterKey, null);
    assert.ok(existsSync(join(t.dataDir, "keys", "signing_key.jwk.json")));
    assert.ok(existsSync(join(t.dataDir, "keys", "secret_box.key")));
    assert.equal((await t.server.context.store.db.selectFrom("keys").selectAll().execute()).length, 0);
    assert.deepEqual(await jwksKids(t.url), [t.server.context.key.kid]);
    assert.equal(decodeProtectedHeader(t.token).kid, t.server.context.key.kid);
  });
});
