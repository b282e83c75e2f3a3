import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { runMain } from "../_helpers/cli.ts";
import { createTestClient } from "../_helpers/client.ts";
import { createTestDatabase, engines, TEST_MASTER_KEY } from "../_helpers/postgres.ts";
import { startTestServer } from "../_helpers/server.ts";

for (const engine of await engines()) {
  it(`creates a token against the store (${engine}) that the server accepts, lists it, and revokes it`, async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "runplane-cli-"));
    // On PostgreSQL the CLI finds the store by RUNPLANE_DATABASE_URL, the keys still in the data dir.
    const database = engine === "postgres" ? await createTestDatabase() : null;
    const cli = (args: string[]) =>
      runMain(args, {
        env: database ? { RUNPLANE_DATABASE_URL: database.url, RUNPLANE_MASTER_KEY: TEST_MASTER_KEY } : {},
      });
    try {
      const created = await cli([
        "service-account",
        "create",
        "--project",
        "p-cli",
        "--name",
        "deployer",
        "--expires",
        "30d",
        "--scope",
        "rest",
        "--data-dir",
        dataDir,
      ]);
      assert.equal(created.code, 0, created.stderr);
      const token = created.stdout.trim();
      assert.match(token, /^[\w-]+\.[\w-]+\.[\w-]+$/, "stdout holds only the token");

      const files = await readdir(dataDir, { recursive: true });
      for (const file of files) {
        const text = await readFile(join(dataDir, String(file))).catch(() => Buffer.alloc(0));
        assert.ok(!text.includes(token), `the token is not stored in ${file}`);
      }

      const t = await startTestServer({ dataDir, databaseUrl: database?.url });
      try {
        const client = createTestClient(t.url, token);
        const call = () =>
          client.POST("/v3/projects/{project_id}/apps/{app_id}/base-image", {
            params: { path: { project_id: "p-cli", app_id: "a" } },
            body: {},
          });
        assert.equal((await call()).response.status, 200);

        const listed = await cli(["service-account", "list", "--project", "p-cli", "--json", "--data-dir", dataDir]);
        const accounts = JSON.parse(listed.stdout) as Array<{ id: string; name: string; scopes: string[] }>;
        assert.equal(accounts.length, 1);
        assert.equal(accounts[0].name, "deployer");
        assert.deepEqual(accounts[0].scopes, ["rest"]);
        assert.ok(!listed.stdout.includes(token));

        const revoked = await cli(["service-account", "revoke", accounts[0].id, "--data-dir", dataDir]);
        assert.equal(revoked.code, 0, revoked.stderr);
        assert.equal((await call()).response.status, 401);
      } finally {
        await t.close();
      }
    } finally {
      await database?.drop();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
}

describe("runplane service-account", () => {
  it("creates no data dir: without a server or an existing data dir it refuses, naming --data-dir and --base-url", async () => {
    const cwd = await mkdtemp(join(tmpdir(), "runplane-no-data-dir-"));
    const missing = join(cwd, "nowhere");
    try {
      const create = ["service-account", "create", "--project", "p-cli", "--name", "x", "--expires", "1d"];
      const outcomes = [
        await runMain(create, { cwd }),
        await runMain([...create, "--data-dir", missing], { cwd }),
        await runMain(create, { cwd, env: { RUNPLANE_DATA_DIR: missing } }),
        await runMain(["service-account", "list", "--project", "p-cli"], { cwd }),
        await runMain(["service-account", "revoke", "sa_x", "--data-dir", missing], { cwd }),
      ];
      for (const outcome of outcomes) {
        assert.equal(outcome.code, 2, outcome.stderr);
        assert.equal(outcome.stdout, "", "no token");
        assert.match(outcome.stderr, /found no data dir at \S+ and creates none: pass --data-dir .* or --base-url/);
      }
      assert.match(outcomes[0].stderr, new RegExp(`no data dir at ${join(cwd, ".runplane")} `));
      assert.match(outcomes[1].stderr, new RegExp(`no data dir at ${missing} `));
      assert.deepEqual(await readdir(cwd), [], "nothing was created where it ran");
    } finally {
      await rm(cwd, { recursive: true, force: true });
    }
  });

  it("exits 2 with a clear message for a bad expiry", async () => {
    const result = await runMain([
      "service-account",
      "create",
      "--project",
      "p-cli",
      "--name",
      "x",
      "--expires",
      "someday",
      "--data-dir",
      join(tmpdir(), "runplane-unused"),
    ]);
    assert.equal(result.code, 2);
    assert.match(result.stderr, /Invalid expiry "someday"/);
  });
});
