import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

describe("the dashboard's session endpoints", () => {
  let t: TestServer;
  before(async () => (t = await startTestServer()));
  after(() => t?.close());

  function signIn(body: unknown, headers: Record<string, string> = {}) {
    return fetch(`${t.url}/dashboard/session`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Origin: t.url, ...headers },
      body: JSON.stringify(body),
    });
  }

  it("answers a token with a sealed HttpOnly, SameSite=Strict cookie, Secure behind https", async () => {
    const plain = await signIn({ token: t.token });
    assert.equal(plain.status, 200);
    const cookie = plain.headers.get("set-cookie")!;
    assert.match(cookie, /^runplane_session=v1\.[^;]+; Path=\/; Expires=[^;]+; HttpOnly; SameSite=Strict$/);
    assert.ok(!cookie.includes(t.token.split(".")[1]), "no token in clear");
    assert.deepEqual(((await plain.json()) as { project_id: string }).project_id, TEST_PROJECT);
    const proxied = await signIn({ token: t.token }, { "X-Forwarded-Proto": "https" });
    assert.match(proxied.headers.get("set-cookie")!, /; Secure$/);
    const session = cookie.split(";")[0];
    const apps = await fetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps`, { headers: { Cookie: session } });
    assert.equal(apps.status, 200, "the cookie authenticates the public API");
  });

  it("ends the session on the server at sign-out: a copy of the cookie no longer authenticates", async () => {
    const session = (await signIn({ token: t.token })).headers.get("set-cookie")!.split(";")[0];
    const other = (await signIn({ token: t.token })).headers.get("set-cookie")!.split(";")[0];
    const apps = () => fetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps`, { headers: { Cookie: session } });
    assert.equal((await apps()).status, 200);
    const ended = await fetch(`${t.url}/dashboard/session/end`, {
      method: "POST",
      headers: { Cookie: session, Origin: t.url },
    });
    assert.equal(ended.status, 204);
    assert.equal((await apps()).status, 401, "the captured cookie is refused after sign-out");
    assert.equal((await fetch(`${t.url}/dashboard/session`, { headers: { Cookie: session } })).status, 401);
    const run = await fetch(`${t.url}/v4/${TEST_PROJECT}/missing/run`, {
      method: "POST",
      headers: { Cookie: session, "Content-Type": "application/json", Origin: t.url },
      body: "{}",
    });
    assert.equal(run.status, 401);
    const still = await fetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps`, { headers: { Cookie: other } });
    assert.equal(still.status, 200, "another session of the same token goes on");
  });

  it("refuses a bad token, another origin, and a state change from another origin", async () => {
    assert.equal((await signIn({ token: "nope" })).status, 401);
    assert.equal((await signIn({})).status, 400);
    assert.equal((await signIn({ token: t.token }, { Origin: "http://evil.example" })).status, 403);
    const session = (await signIn({ token: t.token })).headers.get("set-cookie")!.split(";")[0];
    const run = await fetch(`${t.url}/v4/${TEST_PROJECT}/missing/run`, {
      method: "POST",
      headers: { Cookie: session, "Content-Type": "application/json", Origin: "http://evil.example" },
      body: "{}",
    });
    assert.equal(run.status, 403);
    const noOrigin = await fetch(`${t.url}/v4/${TEST_PROJECT}/missing/run`, {
      method: "POST",
      headers: { Cookie: session, "Content-Type": "application/json" },
      body: "{}",
    });
    assert.equal(noOrigin.status, 403, "without Origin or Sec-Fetch-Site, a cookie may not change state");
    assert.equal((await fetch(`${t.url}/dashboard/session`)).status, 401);
    const ended = await fetch(`${t.url}/dashboard/session/end`, { method: "POST", headers: { Origin: t.url } });
    assert.equal(ended.status, 204);
    assert.match(ended.headers.get("set-cookie")!, /^runplane_session=; Path=\/; Expires=Thu, 01 Jan 1970/);
  });
});
