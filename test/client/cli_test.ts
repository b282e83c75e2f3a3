import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { CapturedOutput, HAS_SCRIPT, runCli, runCliOnTerminal, runMain, spawnCli } from "../_helpers/cli.ts";
import { createFixtureRepo, type FixtureRepo } from "../_helpers/git_repos.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const APPS_DIR = join(import.meta.dirname, "_fixtures", "apps");
const ROOT = join(import.meta.dirname, "..", "..");
const PY_APP = readFileSync(join(import.meta.dirname, "_fixtures", "client_app.py"), "utf8");
const RUN_ID_PATTERN = /^run_[0-9a-z]{26}$/;
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

/** A loopback port that was free a moment ago. */
async function freePort(): Promise<number> {
  const probe = createServer().listen(0, "127.0.0.1");
  await once(probe, "listening");
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

describe("the runplane executable", { timeout: 120_000 }, () => {
  it("starts, prints the commands for --help (exit 0) and a command's flags; no command or an unknown one exits 2", async () => {
    const help = await runCli(["--help"]);
    assert.equal(help.code, 0, help.stderr);
    assert.match(help.stdout, /^Usage: runplane <command> \[flags\]\n\nCommands:\n  serve /);
    for (const name of ["service-account", "repo", "integration", "run", "runs", "base-image", "tree", "webhook"]) {
      assert.match(help.stdout, new RegExp(`^  ${name} `, "m"));
    }
    const runHelp = await runCli(["run", "--help"]);
    assert.equal(runHelp.code, 0, runHelp.stderr);
    assert.match(runHelp.stdout, /^Usage: runplane run <project>\/<app>/);
    const none = await runCli([]);
    assert.equal(none.code, 2);
    assert.equal(none.stdout, help.stdout);
    const unknown = await runCli(["nope"]);
    assert.equal(unknown.code, 2);
    assert.equal(unknown.stderr, `runplane: unknown command "nope"\n\n${help.stdout}`);
  });
});

/**
 * Most commands run in this process through `main(argv, io)`; the executable runs as a subprocess where
 * the process is the point: a stream printed as it arrives, progress on a real terminal, and Ctrl-C
 * ending `webhook listen` (plus the start-up test above).
 */
describe("runplane CLI against a server", { timeout: 300_000 }, () => {
  let t: TestServer;
  let env: Record<string, string>;
  let dir: string;
  before(async () => {
    // The functions write marker files the test reads back: a jailed app cannot (test/sandbox/ covers the jail).
    t = await startTestServer({ env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1", RUNPLANE_SANDBOX: "off" } });
    env = { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: t.token, RUNPLANE_APPS_DIR: APPS_DIR };
    dir = await deployApp(t, "py", {
      toml: "[scaling]\nmax_replicas = 2\nreplica_concurrency = 4\nresponse_grace_period = 60\n",
      files: { "main.py": PY_APP },
    });
  });
  after(() => t.close());

  /** A run's record through the validating client. */
  async function record(runId: string) {
    const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
      params: { path: { project_id: TEST_PROJECT, app_id: "py", run_id: runId } },
    });
    assert.ok(data, `no record of ${runId}`);
    return data;
  }

  it("base-image reads the app's runplane.toml and prints the digest, new while no build made its virtualenv", async () => {
    const first = await runMain(["base-image", "--project", TEST_PROJECT, "--app", "demo"], { env });
    assert.equal(first.code, 0, first.stderr);
    const [digest, status] = first.stdout.trim().split(" ");
    assert.match(digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(status, "new");
    // The same dependencies sent by hand give the same digest: the CLI built the request the contract means.
    const byHand = await t.client.POST("/v3/projects/{project_id}/apps/{app_id}/base-image", {
      params: { path: { project_id: TEST_PROJECT, app_id: "demo" } },
      body: FIXTURE_REQUEST,
    });
    assert.deepEqual(byHand.data, { digest, status: "new" });
    const json = await runMain(["base-image", "--project", TEST_PROJECT, "--app", "demo", "--json"], { env });
    assert.deepEqual(JSON.parse(json.stdout), { digest, status: "new" });
  });

  it("base-image takes --config and the token from --token", async () => {
    const dir = await mkdtemp(join(tmpdir(), "runplane-config-"));
    const config = join(dir, "runplane.toml");
    await writeFile(config, '[dependencies.apt]\njq = "*"\n');
    const outcome = await runMain([
      "base-image",
      "--config",
      config,
      "--project",
      TEST_PROJECT,
      "--app",
      "other",
      "--base-url",
      t.url,
      "--token",
      t.token,
    ]);
    assert.equal(outcome.code, 0, outcome.stderr);
    // Only apt packages (checked on the host): no virtualenv to make.
    assert.match(outcome.stdout, /^sha256:[0-9a-f]{64} cached\n$/);
    await rm(dir, { recursive: true });
  });

  it("base-image says which file is missing, exit 1", async () => {
    const outcome = await runMain(["base-image", "--project", TEST_PROJECT, "--app", "nope"], { env });
    assert.equal(outcome.code, 1);
    assert.match(outcome.stderr, /Cannot read .*nope\/runplane\.toml \(ENOENT\): pass the app's config with --config/);
  });

  it("a usage error exits 2 with the command's help", async () => {
    const outcome = await runMain(["base-image", "--project", "demo"], { env });
    assert.equal(outcome.code, 2);
    assert.match(outcome.stderr, /base-image needs --app/);
    assert.match(outcome.stderr, /Usage: runplane base-image/);
    const unknownFlag = await runMain(["run", "p/a", "--bogus"], { env });
    assert.equal(unknownFlag.code, 2);
    const badData = await runMain(["run", "p/a", "--data", "[1]"], { env });
    assert.equal(badData.code, 2);
    assert.match(badData.stderr, /--data must be a JSON object/);
  });

  it("prints the problem's title and detail without a stack trace on 401, exit 1", async () => {
    const outcome = await runMain(["runs", "list", `${TEST_PROJECT}/demo`], { env: { RUNPLANE_BASE_URL: t.url } });
    assert.equal(outcome.code, 1);
    assert.match(outcome.stderr, /^runplane runs: Authentication required/);
    assertNoStackTrace(outcome.stderr);
  });

  it("base-image reads an example app's runplane.toml from the default apps folder", async () => {
    const { token } = await t.mintToken({ projectId: "p-demo" });
    const outcome = await runMain(["base-image", "--project", "p-demo", "--app", "hello", "--json"], {
      env: { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: token },
      cwd: ROOT,
    });
    assert.equal(outcome.code, 0, outcome.stderr);
    const { digest, status } = JSON.parse(outcome.stdout) as { digest: string; status: string };
    assert.equal(status, "cached", "no pip requirements: nothing to install");
    // examples/apps/p-demo/hello/runplane.toml has no [build] section and no dependencies.
    const byHand = await runMain([
      "base-image",
      "--config",
      join(ROOT, "examples/apps/p-demo/hello/runplane.toml"),
      "--project",
      TEST_PROJECT,
      "--app",
      "hello",
    ], { env });
    assert.equal(byHand.stdout, `${digest} cached\n`);
    const { data } = await t.client.POST("/v3/projects/{project_id}/apps/{app_id}/base-image", {
      params: { path: { project_id: TEST_PROJECT, app_id: "hello" } },
      body: {},
    });
    assert.deepEqual(data, { digest, status: "cached" });
  });

  it("run prints a sync call's result, exit 0; --json prints the whole answer", async () => {
    const outcome = await runMain(["run", `${TEST_PROJECT}/py`, "--data", '{"name":"Ada"}'], { env });
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.equal(outcome.stdout, `${JSON.stringify({ message: "Hello, Ada!" }, null, 2)}\n`);
    assert.equal(outcome.stderr, "");
    const input = join(dir, "input.json");
    await writeFile(input, '{"a": 2, "b": 3}');
    const json = await runMain(["run", `${TEST_PROJECT}/py/add`, "--data", `@${input}`, "--json"], { env });
    assert.equal(json.code, 0, json.stderr);
    const answer = JSON.parse(json.stdout) as { run_id: string; result: unknown };
    assert.equal(answer.result, 5);
    assert.equal((await record(answer.run_id)).status, "success");
  });

  it("run prints a raising function's problem without a stack trace, exit 1", async () => {
    const outcome = await runMain(["run", `${TEST_PROJECT}/py/boom`], { env });
    assert.equal(outcome.code, 1);
    assert.match(
      outcome.stderr,
      /^runplane run: The function raised an exception: .*bad value here.* \(run run_[0-9a-z]{26}\)\n$/,
    );
    assertNoStackTrace(outcome.stderr);
    const json = await runMain(["run", `${TEST_PROJECT}/py/boom`, "--json"], { env });
    assert.equal(json.code, 1);
    const problem = JSON.parse(json.stdout) as { status: number; exception_type: string; traceback: string };
    assert.equal(problem.status, 500);
    assert.equal(problem.exception_type, "ValueError");
    assert.match(problem.traceback, /ValueError: bad value here/);
    const missing = await runMain(["run", `${TEST_PROJECT}/no-such-app`], { env });
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /^runplane run: Not found: Project p-test has no app named no-such-app/);
  });

  it("run --async prints the run id at once", async () => {
    const outcome = await runMain(["run", `${TEST_PROJECT}/py`, "--async", "--data", '{"name":"Bo"}'], { env });
    assert.equal(outcome.code, 0, outcome.stderr);
    const runId = outcome.stdout.trim();
    assert.match(runId, RUN_ID_PATTERN);
    assert.equal((await record(runId)).mode, "async");
  });

  it("run --async --wait waits and prints the result, quiet on stderr when piped; --json prints the final run", async () => {
    const outcome = await runMain(
      ["run", `${TEST_PROJECT}/py/sleepy`, "--async", "--wait", "--data", '{"seconds":1.5}'],
      { env },
    );
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.equal(outcome.stdout, `${JSON.stringify({ slept: 1.5 }, null, 2)}\n`);
    assert.equal(outcome.stderr, "", "no progress when stderr is not a terminal");
    const json = await runMain([
      "run",
      `${TEST_PROJECT}/py/sleepy`,
      "--async",
      "--wait",
      "--json",
      "--data",
      '{"seconds":0.5}',
    ], { env });
    assert.equal(json.code, 0, json.stderr);
    const run = JSON.parse(json.stdout) as { run_id: string; status: string; mode: string; result: unknown };
    assert.deepEqual([run.status, run.mode, run.result], ["success", "async", { slept: 0.5 }]);
    assert.deepEqual(await record(run.run_id), run);
  });

  it("run --async --wait shows progress on a terminal", {
    skip: !HAS_SCRIPT && "needs util-linux script for a pseudo-terminal",
  }, async () => {
    const outcome = await runCliOnTerminal([
      "run",
      `${TEST_PROJECT}/py/sleepy`,
      "--async",
      "--wait",
      "--data",
      '{"seconds":2}',
    ], env);
    assert.equal(outcome.code, 0, outcome.output);
    const progress = /\r\x1b\[K(run_[0-9a-z]{26}) (queued|running) \d+\.\d s/.exec(outcome.output);
    assert.ok(progress, `no progress line in ${JSON.stringify(outcome.output)}`);
    // The progress line is cleared before the result.
    assert.ok(
      outcome.output.endsWith(`\r\x1b[K${JSON.stringify({ slept: 2 }, null, 2).replaceAll("\n", "\r\n")}\r\n`),
      JSON.stringify(outcome.output),
    );
    assert.equal((await record(progress[1])).status, "success");
  });

  it("run --async --wait of a failing function prints the failed run, exit 1", async () => {
    const outcome = await runMain(["run", `${TEST_PROJECT}/py/boom`, "--async", "--wait"], { env });
    assert.equal(outcome.code, 1);
    assert.equal(outcome.stdout, "");
    assert.match(outcome.stderr, /^run_[0-9a-z]{26} failure \(p-test\/py\/boom, async\)\n/);
    assert.match(outcome.stderr, /\nerror: ValueError: bad value here\nTraceback/);
  });

  it("run --stream prints each item as it arrives (the executable, against a real server)", async () => {
    const done = join(dir, "cli-ticks.done");
    const child = spawnCli([
      "run",
      `${TEST_PROJECT}/py/ticks`,
      "--stream",
      "--data",
      JSON.stringify({ n: 3, pause: 1, done }),
    ], { env });
    const exited = once(child, "exit");
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    assert.deepEqual(await lines.next(), { done: false, value: '{"i":0}' });
    assert.equal(existsSync(done), false, "the first item was printed while the generator still ran");
    const rest = [];
    for (let line = await lines.next(); !line.done; line = await lines.next()) rest.push(line.value);
    assert.deepEqual(rest, ['{"i":1}', '{"i":2}', "last tick"]);
    assert.deepEqual(await exited, [0, null]);
    assert.equal(existsSync(done), true);
  });

  it("run --stream exits 1 with the problem of an event: error", async () => {
    const outcome = await runMain(["run", `${TEST_PROJECT}/py/breaks`, "--stream"], { env });
    assert.equal(outcome.code, 1);
    assert.equal(outcome.stdout, "ok\n");
    assert.match(
      outcome.stderr,
      /^runplane run: The function raised an exception: .*went wrong mid-stream.* \(run run_[0-9a-z]{26}\)\n$/,
    );
  });

  it("runs cancel cancels a running run; runs get and runs list show it; a second cancel exits 1", async () => {
    const started = join(dir, "cli-cancel.started");
    const queued = await runMain([
      "run",
      `${TEST_PROJECT}/py/sleepy`,
      "--async",
      "--data",
      // Long enough that the run is still running when the cancel comes on a loaded machine; the cancel
      // ends it early.
      JSON.stringify({ seconds: 40, started }),
    ], { env });
    const runId = queued.stdout.trim();
    assert.match(runId, RUN_ID_PATTERN);
    await waitFor(() => existsSync(started), "the function to start", 30_000);
    const cancelled = await runMain(["runs", "cancel", `${TEST_PROJECT}/py`, runId], { env });
    assert.equal(cancelled.code, 0, cancelled.stderr);
    assert.match(cancelled.stdout, new RegExp(`^${runId} cancelled \\(p-test/py/sleepy, async\\)\\n`));
    const got = await runMain(["runs", "get", `${TEST_PROJECT}/py`, runId, "--json"], { env });
    assert.equal(got.code, 0, got.stderr);
    assert.deepEqual(JSON.parse(got.stdout), await record(runId));
    const listed = await runMain(["runs", "list", `${TEST_PROJECT}/py`, "--status", "cancelled"], { env });
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, /^RUN +STATUS +FUNCTION +MODE +CREATED +RAN +ERROR\n/);
    assert.match(listed.stdout, new RegExp(`^${runId} +cancelled +sleepy +async +`, "m"));
    // A project alone lists every app's runs (listProjectRuns), here filtered by function and mode.
    const wide = await runMain(["runs", "list", TEST_PROJECT, "--function", "sleepy", "--mode", "async"], { env });
    assert.equal(wide.code, 0, wide.stderr);
    assert.match(wide.stdout, /^RUN +APP +STATUS +FUNCTION +MODE +CREATED +RAN +ERROR\n/);
    assert.match(wide.stdout, new RegExp(`^${runId} +py +cancelled +sleepy +async +`, "m"));
    const rows = wide.stdout.split("\n").slice(1).filter(Boolean);
    assert.ok(rows.every((row) => / sleepy +async /.test(row)), wide.stdout);
    const listedJson = JSON.parse(
      (await runMain(["runs", "list", `${TEST_PROJECT}/py`, "--limit", "1", "--json"], { env })).stdout,
    ) as { runs: unknown[] };
    assert.equal(listedJson.runs.length, 1);
    const again = await runMain(["runs", "cancel", `${TEST_PROJECT}/py`, runId], { env });
    assert.equal(again.code, 1);
    assert.match(again.stderr, /^runplane runs: Conflict: /);
    assertNoStackTrace(again.stderr);
  });

  it("webhook listen --port N --secret S prints a real delivery from the server as valid", async () => {
    const secret = "whsec_listen";
    const port = await freePort();
    const stdout = new CapturedOutput();
    const stderr = new CapturedOutput();
    const stop = new AbortController();
    const listening = once(stderr, "text");
    const exited = runMain(["webhook", "listen", "--port", String(port), "--secret", secret], {
      stdout,
      stderr,
      signal: stop.signal,
    });
    try {
      await listening;
      assert.match(stderr.text, new RegExp(`Listening for webhook deliveries on http://127\\.0\\.0\\.1:${port}/`));
      const queued = await runMain([
        "run",
        `${TEST_PROJECT}/py`,
        "--async",
        "--data",
        '{"name":"Hook"}',
        "--webhook",
        `http://127.0.0.1:${port}/hook`,
        "--webhook-secret",
        secret,
      ], { env });
      assert.equal(queued.code, 0, queued.stderr);
      const runId = queued.stdout.trim();
      await waitFor(() => stdout.text.includes("\n}\n"), "the listener to print the delivery", 60_000);
      assert.match(
        stdout.text,
        new RegExp(`^POST /hook run ${runId} signature valid \\(run ${runId}, signed \\d{4}-\\d\\d-\\d\\dT`),
      );
      const body = JSON.parse(stdout.text.slice(stdout.text.indexOf("\n") + 1)) as {
        run_id: string;
        status: string;
        result: unknown;
      };
      assert.deepEqual([body.run_id, body.status, body.result], [runId, "success", { message: "Hello, Hook!" }]);
      // The listener answered 200: the server records the delivery as delivered.
      const webhook = await eventually(
        async () => {
          const { webhook } = await record(runId);
          return webhook && webhook.status !== "pending" ? webhook : undefined;
        },
        30_000,
        "the webhook to settle",
      );
      assert.equal(webhook.status, "delivered");
    } finally {
      stop.abort();
      assert.equal((await exited).code, 0);
    }
  });

  it("tree prints a mirrored repository as an indented view, and the server's answer with --json", async () => {
    const work = await mkdtemp(join(tmpdir(), "runplane-cli-repo-"));
    const fixture: FixtureRepo = await createFixtureRepo(join(work, "widgets"));
    try {
      const added = await runMain([
        "repo",
        "add",
        fixture.path,
        "--project",
        TEST_PROJECT,
        "--as",
        "acme/widgets",
        "--data-dir",
        t.dataDir,
      ]);
      assert.equal(added.code, 0, added.stderr);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
    const outcome = await runMain(["tree", "acme/widgets", "--project", TEST_PROJECT], { env });
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.equal(
      outcome.stdout,
      [
        `acme/widgets @ main (${fixture.main.slice(0, 7)})`,
        "README.md",
        "bin/",
        "  run.sh",
        "docs/",
        "  guide.md",
        "latest@",
        "src/",
        "  lib/",
        "    deep/",
        "      nested/",
        "        leaf.txt",
        "    util.py",
        "  main.py",
        "vendor/",
        "  dep -> 1234567",
        "",
      ].join("\n"),
    );
    const json = await runMain(["tree", "acme/widgets", "--project", TEST_PROJECT, "--ref", "feature", "--json"], {
      env,
    });
    assert.equal(json.code, 0, json.stderr);
    const { data } = await t.client.GET("/v4/projects/{project_id}/integrations/github/repos/{owner}/{repo}/tree", {
      params: { path: { project_id: TEST_PROJECT, owner: "acme", repo: "widgets" }, query: { ref: "feature" } },
    });
    assert.equal(data?.sha, fixture.feature);
    assert.deepEqual(JSON.parse(json.stdout), data);
    const unknown = await runMain(["tree", "acme/nothing", "--project", TEST_PROJECT], { env });
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /^runplane tree: Not found: /);
  });

  it("says how to fix an unreachable server", async () => {
    const closed = createServer().listen(0, "127.0.0.1");
    await once(closed, "listening");
    const { port } = closed.address() as AddressInfo;
    closed.close();
    const outcome = await runMain(["runs", "list", "p/a"], {
      env: { RUNPLANE_BASE_URL: `http://127.0.0.1:${port}`, RUNPLANE_TOKEN: "x" },
    });
    assert.equal(outcome.code, 1);
    assert.match(outcome.stderr, /Cannot reach the server \(ECONNREFUSED\): check --base-url\/--api-url/);
  });

  it("sends run calls to --api-url (RUNPLANE_API_URL) and REST calls to --base-url (RUNPLANE_BASE_URL)", async () => {
    const closed = createServer().listen(0, "127.0.0.1");
    await once(closed, "listening");
    const nowhere = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
    closed.close();
    // The run API answers, the REST API is unreachable: a sync run works, reading runs does not.
    const runOnly = { RUNPLANE_TOKEN: t.token, RUNPLANE_API_URL: t.url, RUNPLANE_BASE_URL: nowhere };
    const ran = await runMain(["run", `${TEST_PROJECT}/py`, "--data", '{"name":"Ada"}'], { env: runOnly });
    assert.equal(ran.code, 0, ran.stderr);
    const listed = await runMain(["runs", "list", `${TEST_PROJECT}/py`], { env: runOnly });
    assert.equal(listed.code, 1);
    assert.match(listed.stderr, /ECONNREFUSED/);
    // The flags win over the variables and swap the roles back.
    const flags = ["--api-url", nowhere, "--base-url", t.url];
    const listedByFlag = await runMain(["runs", "list", `${TEST_PROJECT}/py`, ...flags], { env: runOnly });
    assert.equal(listedByFlag.code, 0, listedByFlag.stderr);
    const ranByFlag = await runMain(["run", `${TEST_PROJECT}/py`, ...flags], { env: runOnly });
    assert.equal(ranByFlag.code, 1);
    assert.match(ranByFlag.stderr, /ECONNREFUSED/);
  });
});

describe("runplane webhook", { timeout: 120_000 }, () => {
  const secret = "whsec_cli";
  const runId = "run_0123456789abcdefghijklmnop";
  const body = JSON.stringify({
    run_id: runId,
    status: "success",
    result: [1, 2],
    error: null,
    run_time_ms: 1,
    timestamp: new Date().toISOString(),
  });
  function headers(timestamp = Math.floor(Date.now() / 1000), signedBody = body) {
    const signature = `v1,${createHmac("sha256", secret).update(`${runId}.${timestamp}.${signedBody}`).digest("hex")}`;
    return {
      "X-Request-Id": runId,
      "X-Runplane-Webhook-Timestamp": String(timestamp),
      "X-Runplane-Webhook-Signature": signature,
      "Content-Type": "application/json",
    };
  }
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-webhook-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("verify accepts a valid delivery (exit 0) and rejects a changed body (exit 1)", async () => {
    await writeFile(join(dir, "body.json"), body);
    await writeFile(join(dir, "headers.txt"), Object.entries(headers()).map(([k, v]) => `${k}: ${v}`).join("\n"));
    const valid = await runMain([
      "webhook",
      "verify",
      "--secret",
      secret,
      "--body",
      join(dir, "body.json"),
      "--headers",
      join(dir, "headers.txt"),
    ]);
    assert.equal(valid.code, 0, valid.stderr);
    assert.match(valid.stdout, new RegExp(`^Signature valid \\(run ${runId}`));
    await writeFile(join(dir, "changed.json"), body.replace("[1,2]", "[1,3]"));
    const changed = await runMain([
      "webhook",
      "verify",
      "--secret",
      secret,
      "--body",
      join(dir, "changed.json"),
      "--headers",
      join(dir, "headers.txt"),
      "--json",
    ]);
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
