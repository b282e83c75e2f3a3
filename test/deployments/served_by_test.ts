/**
 * `served_by`: each process records which deployment it serves, `getApp` lists the live ones, a
 * process's rows go when it stops cleanly, and the rows of a process whose heartbeat is old are neither
 * listed nor kept. And a follower of active deployments that never gets a wake-up still follows, by
 * polling alone, and retries a deployment that a store fault kept it from reading.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { startLocalApps } from "../../server/deployments/_local_apps.ts";
import { SERVED_STALE_MS, startServedReporter } from "../../server/deployments/_served_reporter.ts";
import { createLogger } from "../../server/log.ts";
import { openStore, type Store } from "../../server/store/mod.ts";
import { localNotifier } from "../../server/store/notifier.ts";
import pg from "pg";

const silent = createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, done) => done() }) });

type ServedBy = Array<{ process_id: string; host: string; deployment_id: string; since: string }>;

function app(version: string): Record<string, string> {
  return {
    "runplane.toml": `[deployment]\nname = "listed"\n`,
    "main.py": `def run():\n    return {"v": "${version}"}\n`,
  };
}

for (const engine of await engines()) {
  describe(`served_by (${engine})`, () => {
    let t: TestServer;
    let deployToken: string;
    let v1: string;

    before(async () => {
      t = await startTestServer({ engine });
      deployToken = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
      const first = await deployBundle(t, "listed", await bundleOf(app("1")), deployToken);
      assert.equal(first.status, "ready", first.lines.join("\n"));
      v1 = first.deployment_id;
    });
    after(() => t?.close());

    async function servedBy(): Promise<ServedBy> {
      const response = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/listed`, {
        headers: { Authorization: `Bearer ${deployToken}` },
      });
      assert.equal(response.status, 200);
      return ((await response.json()) as { served_by: ServedBy }).served_by;
    }

    it("lists the process that built a deployment as serving it once the deploy is ready", async () => {
      const listed = await servedBy();
      assert.equal(listed.length, 1, JSON.stringify(listed));
      assert.equal(listed[0].deployment_id, v1);
      assert.equal(listed[0].host, hostname());
      assert.match(listed[0].process_id, /^rp_[0-9a-f]{16}$/);
      assert.ok(Date.parse(listed[0].since) <= Date.now() + 1000);
    });

    it("leaves out a process whose heartbeat is old, and a heartbeat deletes its rows", async () => {
      const db = t.server.context.store.db;
      const now = t.server.context.store.clock.now();
      const row = { project_id: TEST_PROJECT, app_id: "listed", deployment_id: v1, host: "elsewhere", since: now };
      await db.insertInto("served_deployments").values([
        { ...row, process_id: "rp_gone", seen_at: now - SERVED_STALE_MS - 1000 },
        { ...row, process_id: "rp_other", seen_at: now },
      ]).execute();
      const listed = (await servedBy()).map((entry) => entry.process_id);
      assert.ok(listed.includes("rp_other"), `a live process is listed: ${listed}`);
      assert.ok(!listed.includes("rp_gone"), `a process gone quiet is not: ${listed}`);

      const reporter = startServedReporter({
        db,
        logger: silent,
        processId: "rp_reporter",
        host: "test",
        now: t.server.context.store.clock.now,
        heartbeatMs: 50,
      });
      await reporter.report([{ projectId: TEST_PROJECT, appId: "listed", deploymentId: v1, since: now }]);
      const processes = async () =>
        (await db.selectFrom("served_deployments").select("process_id").execute()).map((r) => r.process_id);
      await waitFor(async () => !(await processes()).includes("rp_gone"), "the heartbeat to delete the stale row");
      assert.ok((await servedBy()).some((entry) => entry.process_id === "rp_reporter"));
      await reporter.stop();
      assert.ok(!(await processes()).includes("rp_reporter"), "a clean stop removes the process's rows");
      await db.deleteFrom("served_deployments").where("process_id", "=", "rp_other").execute();
    });

    it("a follower that never gets a wake-up follows a new deployment by polling", { timeout: 120_000 }, async () => {
      const dataDir = await mkdtemp(join(tmpdir(), "runplane-follower-"));
      // A notifier of a file no store uses: no wake-up ever reaches it.
      const deaf = localNotifier(join(dataDir, "nobody.sqlite"));
      const follower = startLocalApps({
        db: t.server.context.store.db,
        notifier: deaf,
        logger: silent,
        // On SQLite the bundles are files of the server's data dir, which every process on its store shares.
        settings: {
          dataDir,
          timeoutMs: 60_000,
          bundleDir: engine === "sqlite" ? join(t.dataDir, "bundles") : undefined,
        },
        now: Date.now,
        onChange: async () => {},
        pollMs: 200,
      });
      try {
        const version = () => follower.list().find((a) => a.name === "listed")?.version;
        await waitFor(() => version() === v1, "the follower to serve version 1", 15_000);
        const second = await deployBundle(t, "listed", await bundleOf(app("2")), deployToken);
        assert.equal(second.status, "ready", second.lines.join("\n"));
        await waitFor(() => version() === second.deployment_id, "the follower to follow by polling", 15_000);
      } finally {
        await follower.stop();
        await deaf.close();
        await rm(dataDir, { recursive: true, force: true });
      }
    });

    /**
     * Runs `use` with a store of a role that may read apps and deployments but not the bundles (a real
     * store fault for whoever materialises: PostgreSQL's "permission denied"); `grantBundles` lifts it.
     */
    async function withoutBundles(
      use: (store: Store, options: { dataDir: string; grantBundles(): Promise<void> }) => Promise<void>,
    ): Promise<void> {
      const role = `rp_follower_${randomBytes(4).toString("hex")}`;
      const admin = new pg.Client({ connectionString: t.databaseUrl! });
      await admin.connect();
      const dataDir = await mkdtemp(join(tmpdir(), "runplane-follower-"));
      let store: Store | undefined;
      try {
        await admin.query(`create role ${role} login`);
        await admin.query(`grant select on apps, deployments to ${role}`);
        const url = new URL(t.databaseUrl!);
        url.username = role;
        store = await openStore(dataDir, { databaseUrl: url.toString(), migrate: false });
        // A bundle is its row and its chunks' rows (migration 0021): reading it takes both tables.
        const grantBundles = async () => void await admin.query(`grant select on bundles, bundle_chunks to ${role}`);
        await use(store, { dataDir, grantBundles });
      } finally {
        await store?.close();
        await admin.query(`drop owned by ${role}`).catch(() => {});
        await admin.query(`drop role if exists ${role}`).catch(() => {});
        await admin.end();
        await rm(dataDir, { recursive: true, force: true });
      }
    }

    it("a follower retries a deployment it could not read from the store at its next poll", {
      skip: engine !== "postgres",
      timeout: 120_000,
    }, async () => {
      await withoutBundles(async (store, { dataDir, grantBundles }) => {
        const errors: string[] = [];
        const logger = createLogger({
          level: "error",
          destination: new Writable({ write: (chunk, _e, done) => done(void errors.push(String(chunk))) }),
        });
        const follower = startLocalApps({
          db: store.db,
          notifier: store.notifier,
          logger,
          settings: { dataDir, timeoutMs: 60_000 },
          now: Date.now,
          onChange: async () => {},
          pollMs: 200,
        });
        try {
          await waitFor(() => errors.some((line) => line.includes("permission denied")), "the fault to be seen");
          await grantBundles();
          const active = (await t.server.context.deployments.getApp({ projectId: TEST_PROJECT, appId: "listed" }))
            .active_deployment_id;
          const follows = () => follower.list().find((a) => a.name === "listed")?.version === active;
          await waitFor(follows, "the follower to serve the deployment once it can read it", 15_000);
        } finally {
          await follower.stop();
        }
      });
    });

    it("a cluster host serves a deployment unbuilt, and a build a store fault stopped is tried again", {
      skip: engine !== "postgres",
      timeout: 120_000,
    }, async () => {
      await withoutBundles(async (store, { dataDir, grantBundles }) => {
        const follower = startLocalApps({
          db: store.db,
          notifier: store.notifier,
          logger: silent,
          settings: { dataDir, timeoutMs: 60_000 },
          now: Date.now,
          onChange: async () => {},
          deferBuilds: true,
        });
        try {
          await follower.sync();
          // Served without reading the bundle: nothing is built until a replica's start asks.
          const served = follower.list().find((a) => a.name === "listed");
          assert.ok(served?.deferred, "the deployment is served from its recorded runplane.toml");
          assert.match(served.configToml, /name = "listed"/);
          await assert.rejects(served.deferred.prepare(), /cannot be built on this host: .*permission denied/);
          await grantBundles();
          await served.deferred.prepare();
          // Built where it was planned: its files are there (earlier tests here deployed v1, then v2).
          assert.match(await readFile(join(served.dir, "main.py"), "utf8"), /return \{"v": "\d"\}/);
        } finally {
          await follower.stop();
        }
      });
    });
  });
}
