/**
 * Project secret names that act before the privilege drop (issue 43), over the REST API on both engines:
 * every name an app's `[env]` may not set is refused as a secret's too, with a 400 naming the variable
 * and why; a secret set before its name was refused never reaches a replica, and can still be deleted.
 * So with a locale variable's value holding `/`, which `[env]` refuses too: checked before it is sealed,
 * and again before a replica gets it.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { checkedFetch } from "../_helpers/contract.ts";
import { engines } from "../_helpers/postgres.ts";
import {
  ALLOWED_ENV_NAMES,
  ALLOWED_ENV_VALUES,
  REFUSED_ENV_NAMES,
  REFUSED_ENV_VALUES,
} from "../_helpers/refused_env_names.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

type Problem = { type: string; status: number; detail: string; errors?: Array<{ path: string; message: string }> };

for (const engine of await engines()) {
  describe(`project secret names that act before the privilege drop (${engine})`, () => {
    let t: TestServer;
    let deploy: string;
    const path = `/v3/projects/${TEST_PROJECT}/secrets`;

    before(async () => {
      t = await startTestServer({ engine });
      deploy = (await t.mintToken({ scopes: ["deploy"] })).token;
    });
    after(() => t?.close());

    function request(method: string, name: string, body?: unknown): Promise<Response> {
      return checkedFetch(`${t.url}${path}/${name}`, {
        method,
        headers: {
          Authorization: `Bearer ${deploy}`,
          ...(body === undefined ? {} : { "Content-Type": "application/json" }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    }

    async function names(): Promise<string[]> {
      const response = await checkedFetch(`${t.url}${path}`, { headers: { Authorization: `Bearer ${deploy}` } });
      assert.equal(response.status, 200);
      return ((await response.json()) as { secrets: Array<{ name: string }> }).secrets.map((s) => s.name);
    }

    it("refuses every one with a 400 validation problem naming the variable and why", async () => {
      for (const { name, why } of REFUSED_ENV_NAMES) {
        const response = await request("PUT", name, { value: "/app/evil" });
        const problem = (await response.json()) as Problem;
        assert.equal(response.status, 400, `${name}: ${JSON.stringify(problem)}`);
        assert.equal(problem.type, "https://runplane.dev/problems/validation", name);
        const lead = `The secret name ${JSON.stringify(name)} `;
        assert.ok(problem.detail.startsWith(lead), `${name}: ${problem.detail}`);
        assert.match(problem.detail.slice(lead.length), why, name);
        assert.deepEqual(problem.errors?.map((e) => e.path), ["path.name"], name);
        assert.match(problem.errors![0].message, why, name);
      }
      assert.deepEqual(await names(), []);
      assert.deepEqual(await t.server.context.projectSecrets.environment(TEST_PROJECT), {});
    });

    it("keeps allowing names that act only in the app's own process", async () => {
      for (const name of ALLOWED_ENV_NAMES) {
        assert.equal((await request("PUT", name, { value: "v" })).status, 201, name);
      }
      assert.deepEqual([...(await names())].sort(), [...ALLOWED_ENV_NAMES].sort());
      for (const name of ALLOWED_ENV_NAMES) assert.equal((await request("DELETE", name)).status, 204, name);
    });

    it("keeps a secret set before its name was refused out of the replicas' environment, and lets it be deleted", async () => {
      assert.equal((await request("PUT", "KEPT", { value: "kept" })).status, 201);
      // A row as an older server stored it, sealed for its project and name as the service seals them.
      const { store, secrets } = t.server.context;
      const now = Date.now();
      await store.db.insertInto("project_secrets").values({
        project_id: TEST_PROJECT,
        name: "GCONV_PATH",
        value_sealed: secrets.seal(JSON.stringify([TEST_PROJECT, "GCONV_PATH", "/app/gconv"])),
        value_bytes: "/app/gconv".length,
        created_at: now,
        updated_at: now,
      }).execute();
      assert.deepEqual(await names(), ["GCONV_PATH", "KEPT"]);
      assert.deepEqual(await t.server.context.projectSecrets.environment(TEST_PROJECT), { KEPT: "kept" });
      assert.equal((await request("DELETE", "GCONV_PATH")).status, 204);
      assert.deepEqual(await names(), ["KEPT"]);
      // Gone, the name is refused again rather than not found.
      const again = await request("DELETE", "GCONV_PATH");
      assert.equal(again.status, 400);
      assert.match(((await again.json()) as Problem).detail, /GCONV_PATH" is read by the C library/);
      assert.equal((await request("DELETE", "KEPT")).status, 204);
    });

    it("refuses a locale variable whose value holds / with a 400 validation problem naming the variable and why", async () => {
      for (const { name, value, why } of REFUSED_ENV_VALUES) {
        const response = await request("PUT", name, { value });
        const problem = (await response.json()) as Problem;
        assert.equal(response.status, 400, `${name}: ${JSON.stringify(problem)}`);
        assert.equal(problem.type, "https://runplane.dev/problems/validation", name);
        const lead = `The secret ${JSON.stringify(name)} `;
        assert.ok(problem.detail.startsWith(lead), `${name}: ${problem.detail}`);
        assert.match(problem.detail.slice(lead.length), why, name);
        assert.deepEqual(problem.errors?.map((e) => e.path), ["body.value"], name);
        assert.match(problem.errors![0].message, why, name);
      }
      assert.deepEqual(await names(), []);
    });

    it("keeps allowing locale variables set to locale names, and gives them to replicas", async () => {
      for (const [name, value] of Object.entries(ALLOWED_ENV_VALUES)) {
        assert.equal((await request("PUT", name, { value })).status, 201, name);
      }
      assert.deepEqual(await t.server.context.projectSecrets.environment(TEST_PROJECT), ALLOWED_ENV_VALUES);
      for (const name of Object.keys(ALLOWED_ENV_VALUES)) assert.equal((await request("DELETE", name)).status, 204);
    });

    it("keeps a locale secret whose value holds /, set before such values were refused, out of the replicas' environment", async () => {
      assert.equal((await request("PUT", "LANG", { value: "C.UTF-8" })).status, 201);
      const { store, secrets } = t.server.context;
      const now = Date.now();
      await store.db.insertInto("project_secrets").values({
        project_id: TEST_PROJECT,
        name: "LC_ALL",
        value_sealed: secrets.seal(JSON.stringify([TEST_PROJECT, "LC_ALL", "/app/locale"])),
        value_bytes: "/app/locale".length,
        created_at: now,
        updated_at: now,
      }).execute();
      assert.deepEqual(await names(), ["LANG", "LC_ALL"]);
      assert.deepEqual(await t.server.context.projectSecrets.environment(TEST_PROJECT), { LANG: "C.UTF-8" });
      // Set again to a locale name, it reaches replicas; deleted, it is gone.
      assert.equal((await request("PUT", "LC_ALL", { value: "C.UTF-8" })).status, 200);
      assert.deepEqual(await t.server.context.projectSecrets.environment(TEST_PROJECT), {
        LANG: "C.UTF-8",
        LC_ALL: "C.UTF-8",
      });
      for (const name of ["LANG", "LC_ALL"]) assert.equal((await request("DELETE", name)).status, 204, name);
      assert.deepEqual(await names(), []);
    });
  });
}
