/**
 * The OCI image a deployment runs in (`[build] base_image`): its reference and digest stored on both
 * engines (migration 0028), null for a deployment without one, and shown by the REST API and the CLI. The
 * image end to end (pulled from a registry, the build recording it) is in test/images/image_apps_test.ts.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { sql } from "kysely";
import { deploymentView } from "../../server/deployments/_deployment_views.ts";
import {
  type BundleSource,
  claimNextBuild,
  insertDeployment,
  recordImage,
  selectDeployment,
} from "../../server/deployments/_records.ts";
import { timeOrderedId } from "../../server/random/mod.ts";
import { MIGRATIONS } from "../../server/store/mod.ts";
import { runMain } from "../_helpers/cli.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const REFERENCE = "registry.example:5000/team/debian:trixie";
const DIGEST = `sha256:${"5f0c".repeat(16)}`;

/** A bundle source of a few bytes, under a digest of its own. */
function tinyBundle(tag: string): BundleSource {
  const bytes = new TextEncoder().encode(tag);
  async function* chunks(): AsyncGenerator<Uint8Array> {
    yield bytes;
  }
  return { digest: `sha256:${tag.padEnd(64, "0")}`, size: bytes.length, chunks };
}

for (const engine of await engines()) {
  describe(`a deployment's image in the store (${engine})`, () => {
    let t: TestStore;
    before(async () => {
      t = await openTestStore(engine);
    });
    after(() => t?.close());

    function deploy(appId: string) {
      return insertDeployment(t.store.db, {
        deploymentId: timeOrderedId("dep_"),
        projectId: "p-image",
        appId,
        bundle: tinyBundle(appId === "plain" ? "aa" : "bb"),
        source: "bundle",
        now: Date.now(),
      });
    }

    it("is null until the build records it; then its reference and digest round-trip, and the view shows them", async () => {
      const plain = await deploy("plain");
      assert.deepEqual([plain.image_reference, plain.image_digest], [null, null]);
      assert.equal(deploymentView(plain, null).image, null, "no base_image: the host's system");
      const imaged = await deploy("imaged");
      await recordImage(t.store.db, { deploymentId: imaged.deployment_id, reference: REFERENCE, digest: DIGEST });
      const ref = { projectId: "p-image", appId: "imaged", deploymentId: imaged.deployment_id };
      const stored = await selectDeployment(t.store.db, ref);
      assert.deepEqual([stored?.image_reference, stored?.image_digest], [REFERENCE, DIGEST]);
      assert.deepEqual(deploymentView(stored!, null).image, { reference: REFERENCE, digest: DIGEST });
      const again = await selectDeployment(t.store.db, { ...ref, appId: "plain", deploymentId: plain.deployment_id });
      assert.equal(deploymentView(again!, null).image, null, "recording one deployment's image leaves others alone");
    });

    it("returns the columns from the build claim's raw statement", async () => {
      const seen = new Map<string, [string | null, string | null]>();
      for (;;) {
        const claimed = await claimNextBuild(t.store.db, { owner: "test", leaseMs: 60_000, now: Date.now() });
        if (!claimed) break;
        seen.set(claimed.app_id, [claimed.image_reference, claimed.image_digest]);
      }
      assert.deepEqual(seen.get("imaged"), [REFERENCE, DIGEST]);
      assert.deepEqual(seen.get("plain"), [null, null]);
    });

    it("migration 0028 adds the columns to a store whose deployments were made before it", async () => {
      // The store as it was before 0028, then 0028 itself: later migrations (already applied) stay as they are.
      const db = t.store.db;
      await sql`alter table "deployments" drop column "image_reference"`.execute(db);
      await sql`alter table "deployments" drop column "image_digest"`.execute(db);
      await MIGRATIONS["0028_deployment_image"]!.up(db);
      const rows = await db.selectFrom("deployments").select(["app_id", "image_reference", "image_digest"])
        .where("project_id", "=", "p-image").orderBy("app_id").execute();
      assert.deepEqual(rows, [
        { app_id: "imaged", image_reference: null, image_digest: null },
        { app_id: "plain", image_reference: null, image_digest: null },
      ]);
    });
  });
}

describe("a deployment's image over the REST API and the CLI", () => {
  let t: TestServer;
  let token: string;
  let env: Record<string, string>;

  before(async () => {
    t = await startTestServer();
    token = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
    env = { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: token };
  });
  after(() => t?.close());

  async function getDeployment(appId: string, id: string): Promise<Record<string, unknown>> {
    const response = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/${appId}/deployments/${id}`, {
      headers: { Authorization: `Bearer ${token}` },
    });
    assert.equal(response.status, 200);
    return (await response.json()) as Record<string, unknown>;
  }

  it("shows image: null for a deployment without [build] base_image, wherever the deployment is shown", async () => {
    const bundle = await bundleOf({ "runplane.toml": "", "main.py": "def run():\n    return 1\n" });
    const ended = await deployBundle(t, "plain", bundle, token);
    assert.equal(ended.status, "ready", ended.error ?? "");
    assert.equal((ended as Record<string, unknown>).image, null, "the build log's end event");
    assert.equal((await getDeployment("plain", ended.deployment_id)).image, null);
    const list = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/plain/deployments`, {
      headers: { Authorization: `Bearer ${token}` },
    });
    const page = (await list.json()) as { deployments: Array<Record<string, unknown>> };
    assert.deepEqual(page.deployments.map((d) => [d.deployment_id, d.image]), [[ended.deployment_id, null]]);
    const shown = await runMain(["deployments", "get", `${TEST_PROJECT}/plain`, ended.deployment_id], { env });
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /^image: - \(the host's system\)$/m);
    assert.doesNotMatch(shown.stdout, /image digest/);
  });

  it("shows a recorded image's reference and digest; the CLI prints them without terminal controls", async () => {
    const bundle = await bundleOf({ "runplane.toml": "", "main.py": "def run():\n    return 2\n" });
    const ended = await deployBundle(t, "imaged", bundle, token);
    assert.equal(ended.status, "ready", ended.error ?? "");
    // Written into the store as a build would; a reference that escapes the terminal, which the deploy's
    // reference check would refuse, stands for whatever reaches the record.
    const hostile = `${REFERENCE}\x1b]0;pwned\x07\x1b[2J`;
    const db = t.server.context.store.db;
    await recordImage(db, { deploymentId: ended.deployment_id, reference: hostile, digest: DIGEST });
    assert.deepEqual((await getDeployment("imaged", ended.deployment_id)).image, {
      reference: hostile,
      digest: DIGEST,
    });
    const app = `${TEST_PROJECT}/imaged`;
    const shown = await runMain(["deployments", "get", app, ended.deployment_id], { env });
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, new RegExp(`^image: ${REFERENCE.replaceAll(".", "\\.")}$`, "m"));
    assert.match(shown.stdout, new RegExp(`^image digest: ${DIGEST}$`, "m"));
    assert.match(shown.stdout, new RegExp(`^${app} ${ended.deployment_id} ready \\(active\\)$`, "m"));
    assert.doesNotMatch(shown.stdout, /\x1b|\x07/);
    const json = await runMain(["deployments", "get", app, ended.deployment_id, "--json"], { env });
    assert.deepEqual((JSON.parse(json.stdout) as { image: unknown }).image, { reference: hostile, digest: DIGEST });
  });
});
