import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { runMain } from "../_helpers/cli.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

type Account = {
  service_account_id: string;
  name: string;
  scopes: string[];
  expires_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
  token?: string;
};

for (const engine of await engines()) {
  describe(`service accounts over the REST API (${engine})`, () => {
    let t: TestServer;
    let admin: string;
    let adminExpiry: number;
    const path = `/v3/projects/${TEST_PROJECT}/service-accounts`;

    before(async () => {
      t = await startTestServer({ engine });
      adminExpiry = Date.now() + 7 * 86_400_000;
      admin = (await t.mintToken({ scopes: ["admin", "rest", "run"], expiresAt: adminExpiry })).token;
    });
    after(() => t?.close());

    function request(method: string, url: string, options: { token?: string; body?: unknown } = {}) {
      return checkedFetch(`${t.url}${url}`, {
        method,
        headers: {
          Authorization: `Bearer ${options.token ?? admin}`,
          ...(options.body === undefined ? {} : { "Content-Type": "application/json" }),
        },
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
      });
    }

    async function list(): Promise<Account[]> {
      const response = await request("GET", path);
      assert.equal(response.status, 200);
      const text = await response.text();
      assert.doesNotMatch(text, /"token"|eyJ/, "a list never holds a token");
      return (JSON.parse(text) as { service_accounts: Account[] }).service_accounts;
    }

    it("mints a token shown once, lists it with its last use, and revokes it", async () => {
      const created = await request("POST", path, { body: { name: "ci", scopes: ["run"] } });
      assert.equal(created.status, 201);
      const account = (await created.json()) as Account;
      assert.deepEqual(account.scopes, ["run"]);
      assert.ok(account.token);
      // No expiry asked: 90 days, or the caller's expiry when that is sooner (it is: 7 days).
      assert.equal(Date.parse(account.expires_at), Math.floor(adminExpiry / 1000) * 1000);

      assert.equal((await list()).find((a) => a.service_account_id === account.service_account_id)?.last_used_at, null);
      const call = await fetch(`${t.url}/v4/${TEST_PROJECT}/missing-app/run`, {
        method: "POST",
        headers: { Authorization: `Bearer ${account.token}`, "Content-Type": "application/json" },
        body: "{}",
      });
      assert.equal(call.status, 404, "authenticated: the app is what is missing");
      const rest = await fetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps`, {
        headers: { Authorization: `Bearer ${account.token}` },
      });
      assert.equal(rest.status, 403, "the minted token has run only");
      let used: string | null = null;
      for (let i = 0; i < 50 && !used; i++) {
        used = (await list()).find((a) => a.service_account_id === account.service_account_id)!.last_used_at;
        if (!used) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.ok(used && Math.abs(Date.parse(used) - Date.now()) < 60_000, `last_used_at ${used}`);

      const revoked = await request("DELETE", `${path}/${account.service_account_id}`);
      assert.equal(revoked.status, 204);
      const after = await fetch(`${t.url}/v4/${TEST_PROJECT}/missing-app/run`, {
        method: "POST",
        headers: { Authorization: `Bearer ${account.token}`, "Content-Type": "application/json" },
        body: "{}",
      });
      assert.equal(after.status, 401);
      assert.ok((await list()).find((a) => a.service_account_id === account.service_account_id)?.revoked_at);
      assert.equal((await request("DELETE", `${path}/sa_AAAAAAAAAAAAAAAA`)).status, 404);
    });

    it("never mints beyond the caller's scopes or lifetime", async () => {
      const escalate = await request("POST", path, { body: { name: "x", scopes: ["deploy"] } });
      assert.equal(escalate.status, 403);
      assert.match(((await escalate.json()) as { detail: string }).detail, /scopes it lacks itself \(deploy\)/);
      const outlive = await request("POST", path, {
        body: { name: "x", scopes: ["run"], expires_at: new Date(adminExpiry + 86_400_000).toISOString() },
      });
      assert.equal(outlive.status, 403);
      assert.match(((await outlive.json()) as { detail: string }).detail, /outlives it/);
      const past = await request("POST", path, {
        body: { name: "x", scopes: ["run"], expires_at: new Date(Date.now() - 1000).toISOString() },
      });
      assert.equal(past.status, 400);
    });

    it("needs the admin scope, and a valid body", async () => {
      const plain = (await t.mintToken({ scopes: ["rest", "run", "deploy"] })).token;
      assert.equal((await request("GET", path, { token: plain })).status, 403);
      assert.equal((await request("POST", path, { token: plain, body: { name: "x", scopes: ["run"] } })).status, 403);
      const bad = await request("POST", path, { body: { name: "x", scopes: ["root"] } });
      assert.equal(bad.status, 400);
      assert.match(JSON.stringify(await bad.json()), /scopes/);
      const empty = await request("POST", path, { body: { name: "", scopes: [] } });
      assert.equal(empty.status, 400);
    });

    it("runplane service-account uses the API when given a server", async () => {
      const env = { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: admin };
      const created = await runMain(
        ["service-account", "create", "--project", TEST_PROJECT, "--name", "from-cli", "--scope", "rest", "--json"],
        { env },
      );
      assert.equal(created.code, 0, created.stderr);
      const { id, token } = JSON.parse(created.stdout) as { id: string; token: string };
      assert.match(token, /^eyJ/);
      const listed = await runMain(["service-account", "list", "--project", TEST_PROJECT], { env });
      assert.match(listed.stdout, new RegExp(`^${id}\\tfrom-cli\\trest\\tactive\\t.*last used never$`, "m"));
      const revoked = await runMain(["service-account", "revoke", id, "--project", TEST_PROJECT], { env });
      assert.equal(revoked.code, 0, revoked.stderr);
      const denied = await runMain(
        ["service-account", "create", "--project", TEST_PROJECT, "--name", "x", "--scope", "deploy"],
        { env },
      );
      assert.equal(denied.code, 1);
      assert.match(denied.stderr, /scopes it lacks itself/);
    });
  });
}
