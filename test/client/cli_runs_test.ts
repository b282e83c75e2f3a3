/**
 * The CLI a newcomer meets against a real server: a run's logs (followed too), reruns and webhook
 * redeliveries, lists as tables, deletes that ask first, and refusals for a token that say what to do.
 * Every answer the CLI gets passes through a proxy that checks it against the contract.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { CapturedOutput, HAS_SCRIPT, runCliOnTerminal, runMain } from "../_helpers/cli.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";
import { type FaultProxy, startFaultProxy } from "./_fault_proxy.ts";

const APP = `${TEST_PROJECT}/logs`;

const LOGS_APP = `import os, sys, time

def chatty():
    print("to stdout", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    return "said"

def slow(started, release):
    print("first line", flush=True)
    open(started, "w").close()
    while not os.path.exists(release):
        time.sleep(0.05)
    print("second line", flush=True)
    return "done"

def fails():
    print("about to fail", flush=True)
    raise ValueError("nope")

def echo(**members):
    return members
`;

/** The column each header word starts at, and where the same column starts in `row`. */
function assertAligned(table: string, headers: string[]): void {
  const [header, ...rows] = table.trimEnd().split("\n");
  assert.match(header, new RegExp(`^${headers.join(" {2,}")}$`), table);
  const starts = headers.map((word) => header.indexOf(word));
  for (const row of rows) {
    for (const start of starts.slice(1)) {
      assert.equal(row[start - 1], " ", `a column of ${JSON.stringify(row)} does not start at ${start}:\n${table}`);
      assert.notEqual(row[start], " ", `a column of ${JSON.stringify(row)} does not start at ${start}:\n${table}`);
    }
  }
}

describe("runplane runs logs, rerun, redeliver, tables, deletes and token errors", { timeout: 300_000 }, () => {
  let t: TestServer;
  let proxy: FaultProxy;
  let receiver: WebhookReceiver;
  let dir: string;
  let env: Record<string, string>;
  let deployToken: string;

  before(async () => {
    // The functions wait on marker files the test writes: a jailed app cannot see them.
    t = await startTestServer({ env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1", RUNPLANE_SANDBOX: "off" } });
    proxy = await startFaultProxy(t.url, { fault: () => undefined });
    receiver = await startWebhookReceiver();
    dir = await mkdtemp(join(tmpdir(), "runplane-cli-runs-"));
    await deployApp(t, "logs", {
      toml: "[scaling]\nmax_replicas = 2\nreplica_concurrency = 4\n",
      files: { "main.py": LOGS_APP },
    });
    deployToken = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
    env = { RUNPLANE_BASE_URL: proxy.url, RUNPLANE_TOKEN: deployToken };
  });
  after(async () => {
    await receiver?.close();
    await proxy?.close();
    await t?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const cli = (args: string[], options: Parameters<typeof runMain>[1] = {}) =>
    runMain(args, { ...options, env: { ...env, ...options.env } });

  /** Starts an async run through the CLI and resolves with its id. */
  async function queue(fn: string, data: Record<string, unknown>, ...flags: string[]): Promise<string> {
    const queued = await cli(["run", `${APP}/${fn}`, "--async", "--data", JSON.stringify(data), ...flags]);
    assert.equal(queued.code, 0, queued.stderr);
    return queued.stdout.trim();
  }

  async function record(runId: string) {
    const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
      params: { path: { project_id: TEST_PROJECT, app_id: "logs", run_id: runId } },
    });
    assert.ok(data, `no record of ${runId}`);
    return data;
  }

  async function settled(runId: string) {
    let run = await record(runId);
    await waitFor(
      async () => ["success", "failure", "cancelled"].includes((run = await record(runId)).status),
      "the run to end",
      60_000,
    );
    return run;
  }

  it("runs logs prints the output on the stream it was written to; --json prints the log document", async () => {
    const runId = await queue("chatty", {});
    await settled(runId);
    const { data: log } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/logs", {
      params: { path: { project_id: TEST_PROJECT, app_id: "logs", run_id: runId } },
    });
    assert.deepEqual(log && "lines" in log && log.lines.map((l) => [l.stream, l.text]), [
      ["stdout", "to stdout"],
      ["stderr", "to stderr"],
    ]);
    const logs = await cli(["runs", "logs", APP, runId]);
    assert.equal(logs.code, 0, logs.stderr);
    assert.equal(logs.stdout, "to stdout\n");
    assert.equal(logs.stderr, "to stderr\n");
    const json = await cli(["runs", "logs", APP, runId, "--json"]);
    assert.deepEqual(JSON.parse(json.stdout), log);
  });

  it("runs logs --follow prints each line as it comes and ends with the run: exit 0, or 1 when it failed", async () => {
    const started = join(dir, "slow.started");
    const release = join(dir, "slow.release");
    const runId = await queue("slow", { started, release });
    await waitFor(() => existsSync(started), "the function to start", 60_000);
    const stdout = new CapturedOutput();
    const stderr = new CapturedOutput();
    const following = cli(["runs", "logs", APP, runId, "--follow"], { stdout, stderr });
    await waitFor(() => stdout.text.includes("first line\n"), "the first line", 30_000);
    assert.doesNotMatch(stdout.text, /second line/);
    await writeFile(release, "");
    const outcome = await following;
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.equal(outcome.stdout, "first line\nsecond line\n");

    const failed = await queue("fails", {});
    const followed = await cli(["runs", "logs", APP, failed, "--follow"]);
    assert.equal(followed.code, 1);
    assert.equal(followed.stdout, "about to fail\n");
    assert.match(followed.stderr, new RegExp(`Run ${failed} ended: failure\\n$`));
    const json = await cli(["runs", "logs", APP, failed, "--follow", "--json"]);
    const lines = json.stdout.trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>);
    assert.equal(lines[0].text, "about to fail");
    assert.deepEqual(lines.at(-1), { status: "failure" });
  });

  it("runs rerun queues the function again with the first run's input, recorded as its rerun", async () => {
    const first = await queue("echo", { a: 1 });
    await settled(first);
    const again = await cli(["runs", "rerun", APP, first]);
    assert.equal(again.code, 0, again.stderr);
    const second = again.stdout.trim();
    assert.match(second, /^run_[0-9a-z]{26}$/);
    const rerun = await settled(second);
    assert.deepEqual([rerun.function_name, rerun.rerun_of, rerun.input, rerun.result], ["echo", first, { a: 1 }, {
      a: 1,
    }]);
    assert.deepEqual((await record(first)).reruns, [second]);
    const waited = await cli(["runs", "rerun", APP, first, "--data", '{"b": 2}', "--wait"]);
    assert.equal(waited.code, 0, waited.stderr);
    assert.equal(waited.stdout, `${JSON.stringify({ b: 2 }, null, 2)}\n`);
    const shown = await cli(["runs", "get", APP, first]);
    assert.match(shown.stdout, new RegExp(`^rerun as: ${second}, run_`, "m"));
  });

  it("runs rerun of a run that kept no input asks for --data", async () => {
    const sync = await cli(["run", `${APP}/echo`, "--data", '{"c": 3}', "--json"]);
    const runId = (JSON.parse(sync.stdout) as { run_id: string }).run_id;
    const refused = await cli(["runs", "rerun", APP, runId]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /kept no input \(a sync run does not.*\): give the input with --data\n$/);
    const given = await cli(["runs", "rerun", APP, runId, "--data", '{"c": 4}', "--wait"]);
    assert.equal(given.code, 0, given.stderr);
    assert.equal(given.stdout, `${JSON.stringify({ c: 4 }, null, 2)}\n`);
  });

  it("runs redeliver sends a finished run's webhook once more", async () => {
    const runId = await queue("echo", { d: 5 }, "--webhook", `${receiver.url}/hook`);
    await receiver.waitFor(1, 60_000);
    await waitFor(async () => (await record(runId)).webhook?.status === "delivered", "the first delivery", 30_000);
    const redelivered = await cli(["runs", "redeliver", APP, runId]);
    assert.equal(redelivered.code, 0, redelivered.stderr);
    assert.equal(redelivered.stdout, `Redelivering the webhook of ${runId} to ${receiver.url}/hook\n`);
    await receiver.waitFor(2, 60_000);
    assert.deepEqual(JSON.parse(receiver.requests[1].body.toString()).result, { d: 5 });
    // Its outcome recorded, not only begun: the next test compares two reads of this run's record.
    await waitFor(
      async () => {
        const webhook = (await record(runId)).webhook;
        return webhook?.attempts.length === 2 && webhook.status === "delivered"
          && webhook.attempts[1].status_code === 200;
      },
      "the second attempt's outcome",
      30_000,
    );
  });

  it("lists print tables with headers; --json prints the server's answer unchanged", async () => {
    const runs = await cli(["runs", "list", APP, "--limit", "3"]);
    assert.equal(runs.code, 0, runs.stderr);
    assertAligned(runs.stdout, ["RUN", "STATUS", "FUNCTION", "MODE", "CREATED", "RAN", "ERROR"]);
    assert.equal(runs.stdout.trimEnd().split("\n").length, 4);
    assert.match(runs.stdout, /\nrun_[0-9a-z]{26} +success +echo +async +\d{4}-/);
    const json = await cli(["runs", "list", APP, "--limit", "3", "--json"]);
    const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs", {
      params: { path: { project_id: TEST_PROJECT, app_id: "logs" }, query: { limit: 3 } },
    });
    assert.deepEqual(JSON.parse(json.stdout), data);
    const apps = await cli(["apps", "list", TEST_PROJECT]);
    assert.equal(apps.code, 0, apps.stderr);
    assertAligned(apps.stdout, ["APP", "STATE", "SOURCE", "RUNTIME", "ACTIVE DEPLOYMENT", "REPLICAS"]);
    assert.match(apps.stdout, /\nlogs +\S+ +directory +python +- +\d+ busy/);
  });

  describe("apps delete", () => {
    let deployed = 0;
    /** Deploys a small app over the REST API and resolves with its `<project>/<app>`. */
    async function deployed_app(): Promise<string> {
      const name = `gone-${++deployed}`;
      const done = await deployBundle(
        t,
        name,
        await bundleOf({ "runplane.toml": "", "main.py": "def run():\n    return 1\n" }),
        deployToken,
      );
      assert.equal(done.status, "ready", done.lines.join("\n"));
      return `${TEST_PROJECT}/${name}`;
    }
    const status = async (app: string) =>
      (await t.client.GET("/v3/projects/{project_id}/apps/{app_id}", {
        params: { path: { project_id: TEST_PROJECT, app_id: app.split("/")[1] } },
      })).response.status;

    it("refuses without a terminal and without --yes, and deletes with --yes", async () => {
      const app = await deployed_app();
      const refused = await cli(["apps", "delete", app], { stdin: Readable.from([]) });
      assert.equal(refused.code, 2);
      assert.match(
        refused.stderr,
        new RegExp(`Not deleting ${app} without a confirmation: there is no terminal to ask on; pass --yes`),
      );
      assert.equal(await status(app), 200, "still there");
      const deleted = await cli(["apps", "delete", app, "--yes"]);
      assert.equal(deleted.code, 0, deleted.stderr);
      assert.equal(await status(app), 404);
    });

    it(
      "asks on a terminal: no keeps the app, yes deletes it",
      { skip: !HAS_SCRIPT && "needs util-linux script" },
      async () => {
        const app = await deployed_app();
        const prompt = new RegExp(`Delete ${app}\\? New calls will answer 404\\. \\[y/N\\] $`);
        const kept = await runCliOnTerminal(["apps", "delete", app], env, { waitFor: prompt, typed: "n\n" });
        assert.equal(kept.code, 1, kept.output);
        assert.match(kept.output, new RegExp(`Cancelled: ${app} was not deleted`));
        assert.equal(await status(app), 200);
        const gone = await runCliOnTerminal(["apps", "delete", app], env, { waitFor: prompt, typed: "y\n" });
        assert.equal(gone.code, 0, gone.output);
        assert.match(gone.output, new RegExp(`Deleted ${app}: new calls answer 404`));
        assert.equal(await status(app), 404);
      },
    );
  });

  it("names every scope a command needs that the token lacks, at once", async () => {
    const { token: runOnly } = await t.mintToken({ scopes: ["run"] });
    const app = join(dir, "scoped");
    assert.equal((await cli(["init", app])).code, 0);
    const refused = await cli(["deploy", app, "--project", TEST_PROJECT], { env: { RUNPLANE_TOKEN: runOnly } });
    assert.equal(refused.code, 1);
    assert.equal(
      refused.stderr,
      'runplane deploy: Forbidden: the token in RUNPLANE_TOKEN lacks the "deploy" and "rest" scopes that runplane deploy needs (it has "run"): use a token made with --scope deploy,rest,run (runplane service-account create)\n',
    );
    const { token: restOnly } = await t.mintToken({ scopes: ["rest"] });
    const deleting = await cli(["apps", "delete", `${TEST_PROJECT}/logs`, "--yes", "--token", restOnly]);
    assert.equal(deleting.code, 1);
    assert.match(
      deleting.stderr,
      /the token in --token lacks the "deploy" scope that runplane apps needs \(it has "rest"\): use a token made with --scope deploy,rest /,
    );
    // --json still prints the server's problem as it was.
    const json = await cli(["deploy", app, "--project", TEST_PROJECT, "--json"], { env: { RUNPLANE_TOKEN: runOnly } });
    assert.equal(JSON.parse(json.stdout).detail, 'This token lacks the "rest" scope: create one with --scope rest');
  });

  it("says to set RUNPLANE_TOKEN or pass --token when the token is missing or refused", async () => {
    const none = await cli(["runs", "list", APP], { env: { RUNPLANE_TOKEN: "" } });
    assert.equal(none.code, 1);
    assert.match(
      none.stderr,
      /^runplane runs: Authentication required: no token was given: set RUNPLANE_TOKEN or pass --token/,
    );
    const bad = await cli(["runs", "list", APP, "--token", "not.a.token"]);
    assert.equal(bad.code, 1);
    assert.match(
      bad.stderr,
      /^runplane runs: Authentication required: .*: the token in --token was refused; set --token to a valid token/,
    );
    const badVariable = await cli(["runs", "list", APP], { env: { RUNPLANE_TOKEN: "not.a.token" } });
    assert.match(badVariable.stderr, /the token in RUNPLANE_TOKEN was refused; set RUNPLANE_TOKEN to a valid token/);
  });

  it("got only answers that match the contract", async () => {
    assert.ok(proxy.seen.length > 20, `the proxy saw ${proxy.seen.length} requests`);
    assert.deepEqual(await proxy.contractErrors(), []);
  });
});
