import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createLocalJWKSet, generateKeyPair, jwtVerify, SignJWT } from "jose";
import { revokeServiceAccount, TOKEN_ISSUER } from "../../server/auth/mod.ts";
import { createTestClient } from "../_helpers/client.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

for (const engine of await engines()) {
  describe(`service-account auth (${engine})`, () => {
    let t: TestServer;
    before(async () => {
      t = await startTestServer({ engine });
    });
    after(() => t.close());

    function hashWith(token: string | undefined, projectId = TEST_PROJECT) {
      return createTestClient(t.url, token).POST("/v3/projects/{project_id}/apps/{app_id}/base-image", {
        params: { path: { project_id: projectId, app_id: "a" } },
        body: {},
      });
    }

    async function assertUnauthorized(token: string | undefined, detail: RegExp) {
      const { response, error } = await hashWith(token);
      assert.equal(response.status, 401);
      assert.match(response.headers.get("www-authenticate") ?? "", /^Bearer realm="runplane"/);
      assert.match(error?.detail ?? "", detail);
    }

    it("accepts a valid token", async () => {
      const { response } = await hashWith(t.token);
      assert.equal(response.status, 200);
    });

    it("answers 401 without a token", () => assertUnauthorized(undefined, /Authorization: Bearer/));

    it("answers 401 for a garbage token", () => assertUnauthorized("not-a-jwt", /malformed/));

    it("answers 401 for a token signed with another key", async () => {
      const other = await generateKeyPair("EdDSA", { crv: "Ed25519" });
      const forged = await new SignJWT({ project_id: TEST_PROJECT, scope: "rest run" })
        .setProtectedHeader({ alg: "EdDSA", kid: t.server.context.key.kid })
        .setIssuer(TOKEN_ISSUER).setSubject("sa_x").setJti("tok_x").setExpirationTime("1h")
        .sign(other.privateKey);
      await assertUnauthorized(forged, /signature/);
    });

    it("answers 401 for a token whose signature is not canonical base64url", async () => {
      const [header, payload, signature] = t.token.split(".");
      assert.equal(signature.length, 86, "an Ed25519 signature: 64 bytes, 86 characters");
      const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
      // The last character carries 2 bits of the signature and 4 unused ones, which must be zero.
      const last = alphabet.indexOf(signature.at(-1)!);
      for (const unused of [1, 2, 4, 8]) {
        const changed = `${signature.slice(0, -1)}${alphabet[last ^ unused]}`;
        await assertUnauthorized(`${header}.${payload}.${changed}`, /malformed/);
      }
      for (const padding of ["=", "=="]) await assertUnauthorized(`${t.token}${padding}`, /malformed/);
      const { response } = await hashWith(t.token);
      assert.equal(response.status, 200, "the canonical token still works after its variants were refused");
    });

    it("answers 401 for an expired token", async () => {
      const expired = await new SignJWT({ project_id: TEST_PROJECT, scope: "rest run" })
        .setProtectedHeader({ alg: "EdDSA", kid: t.server.context.key.kid })
        .setIssuer(TOKEN_ISSUER).setSubject("sa_x").setJti("tok_x")
        .setExpirationTime(Math.floor(Date.now() / 1000) - 60)
        .sign(t.server.context.key.privateKey);
      await assertUnauthorized(expired, /expired/);
    });

    it("answers 401 for a revoked token, at once", async () => {
      const { token, id } = await t.mintToken();
      assert.equal((await hashWith(token)).response.status, 200);
      assert.equal(await revokeServiceAccount(t.server.context.store.db, id), true);
      await assertUnauthorized(token, /revoked/);
    });

    it("answers 403 for a token of another project", async () => {
      const { token } = await t.mintToken({ projectId: "p-other" });
      const { response, error } = await hashWith(token);
      assert.equal(response.status, 403);
      assert.match(error?.detail ?? "", /p-other/);
    });

    it("answers 403 for a token without the rest scope", async () => {
      const { token } = await t.mintToken({ scopes: ["run"] });
      const { response, error } = await hashWith(token);
      assert.equal(response.status, 403);
      assert.match(error?.detail ?? "", /"rest" scope/);
    });

    it("serves a JWKS that verifies a freshly minted token", async () => {
      const { data, response } = await createTestClient(t.url).GET("/.well-known/jwks.json");
      assert.equal(response.status, 200);
      const { token } = await t.mintToken();
      const { payload, protectedHeader } = await jwtVerify(token, createLocalJWKSet(data!), { issuer: TOKEN_ISSUER });
      assert.equal(protectedHeader.alg, "EdDSA");
      assert.equal(payload.project_id, TEST_PROJECT);
      assert.equal(payload.scope, "rest run");
      for (const claim of ["sub", "jti", "exp"]) assert.ok(payload[claim], `claim ${claim}`);
      assert.ok(!("d" in data!.keys[0]), "the private key is never served");
    });
  });
}
