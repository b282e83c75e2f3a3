/**
 * A hostile app's build log, run output and error messages reach the person at the terminal as text:
 * the CLI prints none of the control sequences they hold (a window title, a cleared screen, colours, a
 * carriage return that hides a line's start).
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { runMain } from "../_helpers/cli.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

/** Any C0 control but newline and tab, DEL, or any C1 control: what the CLI must never print. */
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/;

const TOML = `[deployment]
name = "hostile"

[build]
shell_commands = ["printf '\\\\033]0;pwned\\\\007\\\\033[2J\\\\033[31mred\\\\033[0m tail\\\\n'"]
`;

const MAIN = `import time

def run():
    raise ValueError("bad \\x1b[31mthing\\x1b[0m\\x1b]0;title\\x07 done\\r\\x9b2J")

def stream():
    yield "\\x1b]0;title\\x07\\x1b[2Jitem\\x08\\x08 \\x1bPdcs\\x1b\\\\one \\x9b31mtwo"
    yield {"held": "\\x1b[2J kept as JSON"}

def slow():
    time.sleep(0.2)
    raise RuntimeError("\\x1b]8;;https://evil.example\\x07link\\x1b]8;;\\x07 failed")
`;

describe("the CLI prints a hostile app's text without terminal control sequences", { timeout: 120_000 }, () => {
  let t: TestServer;
  let root: string;
  let env: Record<string, string>;
  const app = `${TEST_PROJECT}/hostile`;

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-terminal-"));
    t = await startTestServer();
    const { token } = await t.mintToken({ scopes: ["deploy", "rest", "run"] });
    env = { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: token };
  });
  after(async () => {
    await t?.close();
    await rm(root, { recursive: true, force: true });
  });

  function assertClean(text: string, label: string): void {
    const found = CONTROL.exec(text);
    assert.equal(found, null, `${label} printed ${JSON.stringify(found?.[0])}: ${JSON.stringify(text)}`);
  }

  it("in the build log: deploy, deployments logs and deployments logs --follow", async () => {
    const dir = join(root, "hostile");
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "runplane.toml"), TOML);
    await writeFile(join(dir, "main.py"), MAIN);
    const deployed = await runMain(["deploy", dir, "--project", TEST_PROJECT], { env });
    assert.equal(deployed.code, 0, deployed.stderr + deployed.stdout);
    assertClean(deployed.stdout + deployed.stderr, "deploy");
    assert.match(deployed.stdout, /^ {2}red tail$/m, "the text itself is kept");

    const listed = await runMain(["deployments", "list", app, "--json"], { env });
    const [{ deployment_id: id }] = (JSON.parse(listed.stdout) as { deployments: Array<{ deployment_id: string }> })
      .deployments;
    for (const flags of [[], ["--follow"]]) {
      const logs = await runMain(["deployments", "logs", app, id, ...flags], { env });
      assert.equal(logs.code, 0, logs.stderr);
      assertClean(logs.stdout + logs.stderr, `deployments logs ${flags.join(" ")}`);
      assert.match(logs.stdout, /^red tail$/m);
    }
  });

  it("in a stream's items, and keeps JSON items' values", async () => {
    const streamed = await runMain(["run", `${app}/stream`, "--stream"], { env });
    assert.equal(streamed.code, 0, streamed.stderr);
    assertClean(streamed.stdout, "run --stream");
    assert.equal(streamed.stdout.split("\n")[0], "item one two");
    assert.deepEqual(JSON.parse(streamed.stdout.split("\n")[1]), { held: "\x1b[2J kept as JSON" });
  });

  it("in a function's error, from a call and from a run's record", async () => {
    const called = await runMain(["run", `${app}/run`], { env });
    assert.equal(called.code, 1);
    assertClean(called.stderr + called.stdout, "run");
    assert.match(called.stderr, /bad thing done/);

    const waited = await runMain(["run", `${app}/slow`, "--async", "--wait"], { env });
    assert.equal(waited.code, 1);
    assertClean(waited.stderr + waited.stdout, "run --async --wait");
    assert.match(waited.stderr, /link failed/);
    const runId = /^(run_\w+) failure/m.exec(waited.stderr)![1];
    const got = await runMain(["runs", "get", app, runId], { env });
    assertClean(got.stdout, "runs get");
    assert.match(got.stdout, /RuntimeError: link failed/);
  });
});
