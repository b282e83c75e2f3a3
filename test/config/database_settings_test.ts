import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ConfigError, loadConfig } from "../../server/config.ts";

const MASTER_KEY = randomBytes(32).toString("base64");

describe("database settings", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-config-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));
  const base = () => ({ RUNPLANE_DATA_DIR: dir, RUNPLANE_APPS_DIR: dir });

  it("defaults to the SQLite file (no URL), a pool of 10 and prepared statements", () => {
    const config = loadConfig(base());
    assert.equal(config.databaseUrl, null);
    assert.equal(config.databasePoolSize, 10);
    assert.equal(config.databasePreparedStatements, true);
  });

  it("turns prepared statements off (PgBouncer before 1.21 in transaction mode)", () => {
    assert.equal(
      loadConfig({ ...base(), RUNPLANE_DATABASE_PREPARED_STATEMENTS: "false" }).databasePreparedStatements,
      false,
    );
    assert.throws(() => loadConfig({ ...base(), RUNPLANE_DATABASE_PREPARED_STATEMENTS: "sometimes" }), ConfigError);
  });

  it("takes a postgres:// or postgresql:// URL and a pool size", () => {
    const config = loadConfig({
      ...base(),
      RUNPLANE_DATABASE_URL: "postgresql://rp:pw@db:5432/runplane",
      RUNPLANE_DATABASE_POOL: "25",
      RUNPLANE_MASTER_KEY: MASTER_KEY,
    });
    assert.equal(config.databaseUrl, "postgresql://rp:pw@db:5432/runplane");
    assert.equal(config.databasePoolSize, 25);
    assert.equal(
      loadConfig({ ...base(), RUNPLANE_MASTER_KEY: MASTER_KEY }, { databaseUrl: "postgres://db/x" }).databaseUrl,
      "postgres://db/x",
    );
  });

  it("refuses another scheme and a bad pool size without echoing the URL's password", () => {
    let error: unknown;
    try {
      loadConfig({ ...base(), RUNPLANE_DATABASE_URL: "mysql://rp:hunter2@db/x", RUNPLANE_DATABASE_POOL: "0" });
    } catch (e) {
      error = e;
    }
    assert.ok(error instanceof ConfigError);
    assert.equal(error.problems.length, 2);
    assert.match(error.message, /RUNPLANE_DATABASE_URL="mysql:\/\/rp:\*\*\*@db\/x": must be a postgres:\/\//);
    assert.match(error.message, /RUNPLANE_DATABASE_POOL="0"/);
    assert.ok(!error.message.includes("hunter2"));
  });
});
