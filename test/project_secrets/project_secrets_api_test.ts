/**
 * Project secrets over the REST API on both engines: every response checked against the contract, the
 * value never in a response or a log line and only sealed at rest, names and limits refused with
 * problems, and only a `deploy` token of the project itself let in.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { checkedFetch } from "../_helpers/contract.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

type Secret = { name: string; created_at: string; updated_at: string };
type Problem = { type: string; status: number; detail?: string; errors?: Array<{ path: string }> };

for (const engine of await engines()) {
  describe(`project secrets over the REST API (${engine})`, () => {
    let t: TestServer;
    let deploy: string;
    const path = `/v3/projects/${TEST_PROJECT}/secrets`;
    // Every answer's text, to prove no value is ever in one.
    const answers: string[] = [];

    before(async () => {
      t = await startTestServer({ engine });
      deploy = (await t.mintToken({ scopes: ["deploy", "rest"] })).token;
    });
    after(() => t?.close());

    async function request(
      method: string,
      url: string,
      options: { token?: string; body?: unknown } = {},
    ): Promise<Response> {
      const response = await checkedFetch(`${t.url}${url}`, {
        method,
        headers: {
          Authorization: `Bearer ${options.token ?? deploy}`,
          ...(options.body === undefined ? {} : { "Content-Type": "application/json" }),
        },
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
      });
      const headers: string[] = [];
      response.headers.forEach((value, name) => headers.push(`${name}: ${value}`));
      answers.push(`${headers.join("\n")}\n${await response.clone().text()}`);
      return response;
    }

    function put(name: string, value: unknown, token?: string): Promise<Response> {
      return request("PUT", `${path}/${name}`, { body: { value }, token });
    }

    async function list(token?: string): Promise<Secret[]> {
      const response = await request("GET", path, { token });
      assert.equal(response.status, 200);
      return ((await response.json()) as { secrets: Secret[] }).secrets;
    }

    it("sets a secret (201), replaces it (200), lists names and times, and deletes it (204, then 404)", async () => {
      const created = await put("API_KEY", "first");
      assert.equal(created.status, 201);
      const secret = (await created.json()) as Secret;
      assert.equal(secret.name, "API_KEY");
      assert.equal(secret.created_at, secret.updated_at);
      const replaced = await put("API_KEY", "second");
      assert.equal(replaced.status, 200);
      const again = (await replaced.json()) as Secret;
      assert.equal(again.created_at, secret.created_at);
      assert.ok(again.updated_at >= secret.updated_at);
      assert.equal((await put("DB_URL", "postgres://u:p@db/app")).status, 201);
      assert.deepEqual((await list()).map((s) => s.name), ["API_KEY", "DB_URL"]);
      assert.deepEqual(await t.server.context.projectSecrets.environment(TEST_PROJECT), {
        API_KEY: "second",
        DB_URL: "postgres://u:p@db/app",
      });
      assert.equal((await request("DELETE", `${path}/API_KEY`)).status, 204);
      const missing = await request("DELETE", `${path}/API_KEY`);
      assert.equal(missing.status, 404);
      assert.match(((await missing.json()) as Problem).detail!, /has no secret API_KEY/);
      assert.deepEqual((await list()).map((s) => s.name), ["DB_URL"]);
      assert.equal((await request("DELETE", `${path}/DB_URL`)).status, 204);
    });

    it("never answers or logs a value, and keeps it only sealed", async () => {
      const value = `s3cr3t-${randomBytes(12).toString("hex")}`;
      assert.equal((await put("NEVER_SHOWN", value)).status, 201);
      assert.equal((await put("NEVER_SHOWN", value)).status, 200);
      await list();
      // Refused calls carrying the value too: a bad name, and a bad value next to it.
      assert.equal((await put("RUNPLANE_SHOWN", value)).status, 400);
      assert.equal((await request("PUT", `${path}/NEVER_SHOWN`, { body: { value: [value] } })).status, 400);
      assert.equal((await put("NUL_VALUE", `${value}\u0000`)).status, 400);
      for (const answer of answers) assert.ok(!answer.includes(value), answer);
      // The request log lines are written when each response has closed.
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.ok(t.logs.some((line) => line.operationId === "putProjectSecret"), "the calls were logged");
      assert.ok(!t.rawLogs().includes(value), "no log line holds the value");

      const rows = await t.server.context.store.db.selectFrom("project_secrets").selectAll()
        .where("project_id", "=", TEST_PROJECT).execute();
      const raw = JSON.stringify(rows);
      assert.ok(raw.includes("NEVER_SHOWN") && !raw.includes(value), raw);
      assert.ok(
        !raw.includes(Buffer.from(value).toString("base64")) && !raw.includes(Buffer.from(value).toString("hex")),
      );
      if (engine === "sqlite") {
        // Not in the database file or its write-ahead log either, in any page.
        for (const file of (await readdir(t.dataDir)).filter((f) => f.startsWith("runplane.sqlite3"))) {
          const bytes = await readFile(join(t.dataDir, file));
          assert.equal(bytes.indexOf(Buffer.from(value)), -1, `${file} holds the value`);
        }
      }
      assert.equal((await t.server.context.projectSecrets.environment(TEST_PROJECT)).NEVER_SHOWN, value);
      assert.equal((await request("DELETE", `${path}/NEVER_SHOWN`)).status, 204);
    });

    it("refuses names that are not environment variables' (400), RUNPLANE_ ones included", async () => {
      for (const name of ["1ABC", "A-B", "RUNPLANE_X", "A%20B", "%C3%89", "a".repeat(129)]) {
        const response = await put(name, "v");
        assert.equal(response.status, 400, name);
        const problem = (await response.json()) as Problem;
        assert.equal(problem.type, "https://runplane.dev/problems/validation");
        assert.deepEqual(problem.errors?.map((e) => e.path), ["path.name"], name);
        assert.equal((await request("DELETE", `${path}/${name}`)).status, 400, name);
      }
      const reserved = (await (await put("RUNPLANE_TOKEN", "v")).json()) as Problem;
      assert.match(reserved.detail!, /RUNPLANE_, which the platform's own variables use/);
      // No name at all is no secret: the path is the list's, which cannot be PUT.
      const empty = await put("", "v");
      assert.equal(empty.status, 405);
      assert.equal(empty.headers.get("allow"), "GET");
      assert.deepEqual(await list(), []);
    });

    it("refuses a body without a string value (400)", async () => {
      assert.equal((await put("A", 42)).status, 400);
      assert.equal((await request("PUT", `${path}/A`, { body: {} })).status, 400);
      assert.equal((await request("PUT", `${path}/A`)).status, 400);
      const text = await checkedFetch(`${t.url}${path}/A`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${deploy}`, "Content-Type": "text/plain" },
        body: "value",
      });
      assert.equal(text.status, 415);
    });

    it("needs the deploy scope (403 for a run or rest token, even an admin one)", async () => {
      await put("SCOPED", "v");
      for (const scopes of [["run"], ["rest", "run"], ["admin", "rest", "run"]] as const) {
        const token = (await t.mintToken({ scopes: [...scopes] })).token;
        for (
          const response of [
            await request("GET", path, { token }),
            await put("SCOPED", "w", token),
            await request("DELETE", `${path}/SCOPED`, { token }),
          ]
        ) {
          assert.equal(response.status, 403, scopes.join(" "));
          assert.match(((await response.json()) as Problem).detail!, /lacks the "deploy" scope/);
        }
      }
      assert.equal((await request("GET", path, { token: "" })).status, 401);
      const deployOnly = (await t.mintToken({ scopes: ["deploy"] })).token;
      assert.deepEqual((await list(deployOnly)).map((s) => s.name), ["SCOPED"]);
      assert.deepEqual(await t.server.context.projectSecrets.environment(TEST_PROJECT), { SCOPED: "v" });
    });

    it("keeps projects apart: another project's token can neither read nor change them", async () => {
      const other = (await t.mintToken({ projectId: "p-other", scopes: ["admin", "deploy", "rest", "run"] })).token;
      for (
        const response of [
          await request("GET", path, { token: other }),
          await put("SCOPED", "stolen", other),
          await put("INJECTED", "x", other),
          await request("DELETE", `${path}/SCOPED`, { token: other }),
        ]
      ) {
        assert.equal(response.status, 403);
        assert.match(((await response.json()) as Problem).detail!, /belongs to project p-other, not p-test/);
      }
      const ownPath = `/v3/projects/p-other/secrets`;
      assert.equal((await request("PUT", `${ownPath}/OWN`, { token: other, body: { value: "theirs" } })).status, 201);
      assert.deepEqual(
        ((await (await request("GET", ownPath, { token: other })).json()) as { secrets: Secret[] }).secrets.map((s) =>
          s.name
        ),
        ["OWN"],
      );
      assert.deepEqual(await t.server.context.projectSecrets.environment(TEST_PROJECT), { SCOPED: "v" });
      assert.deepEqual(await t.server.context.projectSecrets.environment("p-other"), { OWN: "theirs" });
    });

    it("names each limit: 413 over 64 KiB a value, 409 past 100 secrets, 413 over 1 MiB in all", async () => {
      const token = (await t.mintToken({ projectId: "p-limits", scopes: ["deploy"] })).token;
      const limits = "/v3/projects/p-limits/secrets";
      const set = (name: string, value: string) => request("PUT", `${limits}/${name}`, { token, body: { value } });
      const big = "x".repeat(64 * 1024);
      assert.equal((await set("BIG_0", big)).status, 201);
      const tooBig = await set("TOO_BIG", `${big}x`);
      assert.equal(tooBig.status, 413);
      const tooBigProblem = (await tooBig.json()) as Problem;
      assert.equal(tooBigProblem.type, "https://runplane.dev/problems/content-too-large");
      assert.match(tooBigProblem.detail!, /65537 bytes; the limit is 65536 bytes \(64 KiB\) per value/);
      for (let i = 1; i < 16; i++) assert.equal((await set(`BIG_${i}`, big)).status, 201);
      const total = await set("ONE_MORE", "x");
      assert.equal(total.status, 413);
      assert.match(((await total.json()) as Problem).detail!, /the limit is 1048576 bytes \(1 MiB\) per project/);
      for (let i = 0; i < 16; i++) assert.equal((await set(`BIG_${i}`, "")).status, 200);
      for (let i = 16; i < 100; i++) assert.equal((await set(`S_${i}`, "v")).status, 201);
      const past = await set("ONE_MORE", "v");
      assert.equal(past.status, 409);
      const pastProblem = (await past.json()) as Problem;
      assert.equal(pastProblem.type, "https://runplane.dev/problems/conflict");
      assert.match(pastProblem.detail!, /has 100 secrets; the limit is 100 per project: delete one first/);
      assert.equal((await set("S_16", "replaced")).status, 200, "replacing one at the limit is not one more");
    });
  });
}
