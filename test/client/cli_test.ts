import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { runCli, spawnCli } from "../_helpers/cli.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const APPS_DIR = join(import.meta.dirname, "_fixtures", "apps");
const b64 = (text: string) => Buffer.from(text).toString("base64");

/** The request the fixture's runplane.toml describes, written out by hand. */
const FIXTURE_REQUEST = {
  aptPackages: ["curl", "git=1:2.39.5-0+deb12u1"],
  pipRequirements: ["requests==2.32.0", "numpy>=2.0", "rich"],
  baseImageUri: "python:3.12-slim",
  preBuildCommands: [b64("apt-get update")],
  shellCommands: [b64("echo hello > /greeting"), b64("chmod +x /usr/local/bin/tool")],
};

function assertNoStackTrace(text: string) {
  assert.doesNotMatch(text, /^\s+at /m, `a stack trace was printed:\n${text}`);
}

describe("runplane CLI as a subprocess", { timeout: 120_000 }, () => {
  let t: TestServer;
  let env: Record<string, string>;
  before(async () => {
    t = await startTestServer();
    env = { RUNPLANE_API_URL: t.url, RUNPLANE_TOKEN: t.token, RUNPLANE_APPS_DIR: APPS_DIR };
  });
  after(() => t.close());

  it("base-image reads the app's runplane.toml and prints the digest, new then cached", async () => {
    const first = await runCli(["base-image", "--project", TEST_PROJECT, "--app", "demo"], { env });
    assert.equal(first.code, 0, first.stderr);
    const [digest, status] = first.stdout.trim().split(" ");
    assert.match(digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(status, "new");
    // The same dependencies sent by hand give the same digest: the CLI built the request the contract means.
    const byHand = await t.client.POST("/v3/projects/{project_id}/apps/{app_id}/base-image", {
      params: { path: { project_id: TEST_PROJECT, app_id: "demo" } },
      body: FIXTURE_REQUEST,
    });
    assert.deepEqual(byHand.data, { digest, status: "cached" });
    const json = await runCli(["base-image", "--project", TEST_PROJECT, "--app", "demo", "--json"], { env });
    assert.deepEqual(JSON.parse(json.stdout), { digest, status: "cached" });
  });

  it("base-image takes --config and the token from --token", async () => {
    const dir = await mkdtemp(join(tmpdir(), "runplane-config-"));
    const config = join(dir, "runplane.toml");
    await writeFile(config, '[dependencies.apt]\njq = "*"\n');
    const outcome = await runCli(["base-image", "--config", config, "--project", TEST_PROJECT, "--app", "other", "--api-url", t.url, "--token", t.token]);
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.match(outcome.stdout, /^sha256:[0-9a-f]{64} new\n$/);
    await rm(dir, { recursive: true });
  });

  it("base-image says which file is missing, exit 1", async () => {
    const outcome = await runCli(["base-image", "--project", TEST_PROJECT, "--app", "nope"], { env });
    assert.equal(outcome.code, 1);
    assert.match(outcome.stderr, /Cannot read .*nope\/runplane\.toml \(ENOENT\): pass the app's config with --config/);
  });

  it("a usage error exits 2 with the command's help", async () => {
    const outcome = await runCli(["base-image", "--app", "demo"], { env });
    assert.equal(outcome.code, 2);
    assert.match(outcome.stderr, /base-image needs --project and --app/);
    assert.match(outcome.stderr, /Usage: runplane base-image/);
    const unknownFlag = await runCli(["run", "p/a", "--bogus"], { env });
    assert.equal(unknownFlag.code, 2);
    const badData = await runCli(["run", "p/a", "--data", "[1]"], { env });
    assert.equal(badData.code, 2);
    assert.match(badData.stderr, /--data must be a JSON object/);
  });

  it("prints the problem's title and detail without a stack trace on 401, exit 1", async () => {
    const outcome = await runCli(["runs", "list", `${TEST_PROJECT}/demo`], { env: { RUNPLANE_API_URL: t.url } });
    assert.equal(outcome.code, 1);
    assert.match(outcome.stderr, /^runplane runs: Authentication required/);
    assertNoStackTrace(outcome.stderr);
  });

  it("prints the server's problem for calls it cannot serve yet (501), as JSON with --json", async () => {
    for (const args of [["run", `${TEST_PROJECT}/demo`, "--data", '{"name":"Ada"}'], ["run", `${TEST_PROJECT}/demo/counter`, "--stream"], ["runs", "get", `${TEST_PROJECT}/demo`, "run_0123456789abcdefghijklmnop"]]) {
      const outcome = await runCli(args, { env });
      assert.equal(outcome.code, 1, args.join(" "));
      assert.match(outcome.stderr, /: Not implemented: \w+ is not implemented on this server yet\n$/);
      assertNoStackTrace(outcome.stderr);
    }
    const json = await runCli(["run", `${TEST_PROJECT}/demo`, "--async", "--json"], { env });
    assert.equal(json.code, 1);
    assert.equal(JSON.parse(json.stdout).status, 501);
  });

  it("says how to fix an unreachable server", async () => {
    const closed = createServer().listen(0, "127.0.0.1");
    await once(closed, "listening");
    const { port } = closed.address() as AddressInfo;
    closed.close();
    const outcome = await runCli(["runs", "list", "p/a"], { env: { RUNPLANE_API_URL: `http://127.0.0.1:${port}`, RUNPLANE_TOKEN: "x" } });
    assert.equal(outcome.code, 1);
    assert.match(outcome.stderr, /Cannot reach the server \(ECONNREFUSED\): check --api-url/);
  });
});

describe("runplane webhook", { timeout: 120_000 }, () => {
  const secret = "whsec_cli";
  const runId = "run_0123456789abcdefghijklmnop";
  const body = JSON.stringify({ run_id: runId, status: "success", result: [1, 2], error: null, run_time_ms: 1, timestamp: new Date().toISOString() });
  function headers(timestamp = Math.floor(Date.now() / 1000), signedBody = body) {
    const signature = `v1,${createHmac("sha256", secret).update(`${runId}.${timestamp}.${signedBody}`).digest("hex")}`;
    return { "X-Request-Id": runId, "X-Runplane-Webhook-Timestamp": String(timestamp), "X-Runplane-Webhook-Signature": signature, "Content-Type": "application/json" };
  }
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-webhook-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("verify accepts a valid delivery (exit 0) and rejects a changed body (exit 1)", async () => {
    await writeFile(join(dir, "body.json"), body);
    await writeFile(join(dir, "headers.txt"), Object.entries(headers()).map(([k, v]) => `${k}: ${v}`).join("\n"));
    const valid = await runCli(["webhook", "verify", "--secret", secret, "--body", join(dir, "body.json"), "--headers", join(dir, "headers.txt")]);
    assert.equal(valid.code, 0, valid.stderr);
    assert.match(valid.stdout, new RegExp(`^Signature valid \\(run ${runId}`));
    await writeFile(join(dir, "changed.json"), body.replace("[1,2]", "[1,3]"));
    const changed = await runCli(["webhook", "verify", "--secret", secret, "--body", join(dir, "changed.json"), "--headers", join(dir, "headers.txt"), "--json"]);
    assert.equal(changed.code, 1);
    assert.equal(JSON.parse(changed.stdout).valid, false);
  });

  it("listen prints each delivery and whether its signature is valid", async () => {
    const child = spawnCli(["webhook", "listen", "--port", "0", "--secret", secret, "--json"]);
    try {
      let stderr = "";
      child.stderr.setEncoding("utf8");
      while (!/Listening .* on (http:\S+)/.test(stderr)) {
        const [chunk] = (await once(child.stderr, "data")) as [string];
        stderr += chunk;
      }
      const url = /on (http:\S+)/.exec(stderr)![1];
      const lines: Array<Record<string, unknown>> = [];
      child.stdout.setEncoding("utf8");
      let buffered = "";
      child.stdout.on("data", (chunk: string) => {
        buffered += chunk;
        const parts = buffered.split("\n");
        buffered = parts.pop()!;
        lines.push(...parts.map((line) => JSON.parse(line) as Record<string, unknown>));
      });
      // The listener is the receiver, not a Runplane server: its answers are outside the contract.
      const good = await fetch(url, { method: "POST", headers: headers(), body });
      const bad = await fetch(url, { method: "POST", headers: headers(Math.floor(Date.now() / 1000) - 3600), body });
      assert.equal(good.status, 200);
      assert.equal(bad.status, 401);
      while (lines.length < 2) await once(child.stdout, "data");
      assert.equal(lines[0].signature, "valid");
      assert.equal(lines[0].run_id, runId);
      assert.deepEqual((lines[0].body as { result: unknown }).result, [1, 2]);
      assert.equal(lines[1].signature, "invalid");
      assert.match(String(lines[1].reason), /beyond the 300 s tolerance/);
    } finally {
      child.kill("SIGINT");
      const [code] = await once(child, "exit");
      assert.equal(code, 0);
    }
  });
});
