import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createServiceAccount, revokeServiceAccount } from "../../server/auth/mod.ts";
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
      // A JWT's shape, not just `eyJ`: a random account id may hold those three letters.
      assert.doesNotMatch(text, /"token"|eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+/, "a list never holds a token");
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

    it("refuses the tokens a revoked token minted, and theirs, at once; the others go on", async () => {
      const root = await t.mintToken({ scopes: ["admin", "rest", "run"], expiresAt: adminExpiry });
      async function mint(by: string, name: string, scopes: string[]): Promise<Account & { token: string }> {
        const created = await request("POST", path, { token: by, body: { name, scopes } });
        assert.equal(created.status, 201, await created.clone().text());
        return (await created.json()) as Account & { token: string };
      }
      async function status(token: string): Promise<number> {
        const response = await fetch(`${t.url}/v4/${TEST_PROJECT}/missing-app/run`, {
          method: "POST",
          headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
          body: "{}",
        });
        return response.status; // 404 (the app is missing) once authenticated
      }
      const child = await mint(root.token, "child", ["admin", "run"]);
      const grandchild = await mint(child.token, "grandchild", ["run"]);
      const sibling = await mint(root.token, "sibling", ["run"]);
      for (const token of [child.token, grandchild.token, sibling.token]) assert.equal(await status(token), 404);

      assert.equal((await request("DELETE", `${path}/${child.service_account_id}`)).status, 204);
      assert.equal(await status(child.token), 401);
      assert.equal(await status(grandchild.token), 401, "minted by a revoked token");
      assert.equal(await status(sibling.token), 404, "the revoked token's sibling goes on");
      assert.equal(await status(root.token), 404, "and so does its minter");
      const listed = await list();
      assert.ok(listed.find((a) => a.service_account_id === grandchild.service_account_id)?.revoked_at);
      assert.equal(listed.find((a) => a.service_account_id === sibling.service_account_id)?.revoked_at, null);

      // Revoked where the server runs (the CLI's way): everything the root minted goes with it.
      assert.equal(await revokeServiceAccount(t.server.context.store.db, root.id), true);
      assert.equal(await status(sibling.token), 401);
    });

    it("refuses a token minted by one revoked meanwhile: the chain is read at every call", async () => {
      const root = await t.mintToken({ scopes: ["admin", "run"] });
      const db = t.server.context.store.db;
      // A mint that raced the revocation: the child's row is written after its minter's was revoked.
      await db.updateTable("service_accounts").set({ revoked_at: Date.now() }).where("id", "=", root.id).execute();
      const { token } = await createServiceAccount({ db, key: t.server.context.key }, {
        projectId: TEST_PROJECT,
        name: "raced",
        scopes: ["run"],
        expiresAt: Date.now() + 3_600_000,
        parentId: root.id,
      });
      const response = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/missing-app/run`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: "{}",
      });
      assert.equal(response.status, 401);
      assert.match(((await response.json()) as { detail: string }).detail, /revoked/);
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
      assert.match(listed.stdout, /^ID +NAME +SCOPES +STATE +EXPIRES +LAST USED\n/);
      assert.match(listed.stdout, new RegExp(`^${id} +from-cli +rest +active +\\S+Z +never$`, "m"));
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
