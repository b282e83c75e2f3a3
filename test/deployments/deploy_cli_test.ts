import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CapturedOutput, runCli, runMain } from "../_helpers/cli.ts";
import { git } from "../_helpers/git_repos.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { writeWheel } from "../_helpers/wheels.ts";

/** An app folder: `main.py` answers its version and the version of the wheel it imports. */
async function writeApp(dir: string, version: string, toml = ""): Promise<string> {
  await mkdir(dir, { recursive: true });
  await writeFile(
    join(dir, "runplane.toml"),
    `[deployment]\nname = "hello"\nexclude = ["secrets/**"]\n\n[scaling]\nmax_replicas = 2\n\n`
      + `[dependencies.pip]\nrp_clidep = "1.0"\n${toml}`,
  );
  await writeFile(
    join(dir, "main.py"),
    `import os, time\nimport rp_clidep\n\n`
      + `def run(seconds=0):\n    time.sleep(seconds)\n`
      + `    return {"v": "${version}", "dep": rp_clidep.VALUE, "secret": os.path.exists("secrets/key.txt")}\n`,
  );
  await mkdir(join(dir, "secrets"), { recursive: true });
  await writeFile(join(dir, "secrets", "key.txt"), "never uploaded");
  return dir;
}

describe("runplane deploy, deployments and apps against a running server", () => {
  let t: TestServer;
  let root: string;
  let env: Record<string, string>;

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-deploy-cli-"));
    const wheels = join(root, "wheels");
    await mkdir(wheels);
    writeWheel(wheels, "rp_clidep", "1.0");
    t = await startTestServer({ env: { RUNPLANE_PIP_FIND_LINKS: wheels } });
    const { token } = await t.mintToken({ scopes: ["deploy", "rest", "run"] });
    env = { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: token };
  });
  after(async () => {
    await t?.close();
    await rm(root, { recursive: true, force: true });
  });

  async function call(app: string, input: Record<string, unknown> = {}) {
    const response = await fetch(`${t.url}/v4/${TEST_PROJECT}/${app}/run`, {
      method: "POST",
      headers: { Authorization: `Bearer ${env.RUNPLANE_TOKEN}`, "Content-Type": "application/json" },
      body: JSON.stringify(input),
    });
    const answer = (await response.json()) as { result?: { v: string; dep: string; secret: boolean } };
    return { status: response.status, body: answer.result ?? {} as { v?: string } };
  }

  const deploy = (dir: string, ...flags: string[]) =>
    runMain(["deploy", dir, "--project", TEST_PROJECT, ...flags], { env });

  it("deploys, redeploys under a call in flight, survives failed builds, rolls back and deletes", async () => {
    // The first deploy runs the executable as a user does; the server's apps folder is empty.
    const v1 = await runCli(["deploy", await writeApp(join(root, "v1"), "1"), "--project", TEST_PROJECT], { env });
    assert.equal(v1.code, 0, v1.stderr + v1.stdout);
    assert.match(v1.stdout, /Dependency layer: new: pip will make its virtualenv \(sha256:[0-9a-f]{64}\)/);
    assert.match(v1.stdout, /==> pip: new virtualenv/);
    assert.match(v1.stdout, new RegExp(`Run URL: ${t.url}/v4/${TEST_PROJECT}/hello/run`));
    assert.match(v1.stdout, /curl -X POST .*\n.*Authorization: Bearer \$RUNPLANE_TOKEN/);
    assert.doesNotMatch(v1.stdout, new RegExp(env.RUNPLANE_TOKEN), "the token is never printed");
    assert.deepEqual((await call("hello")).body, { v: "1", dep: "1.0", secret: false });

    // A 3 s call in flight finishes on version 1; the next call gets version 2.
    const inFlight = call("hello", { seconds: 3 });
    await new Promise((resolve) => setTimeout(resolve, 500));
    const v2 = await deploy(await writeApp(join(root, "v2"), "2"));
    assert.equal(v2.code, 0, v2.stderr + v2.stdout);
    assert.match(v2.stdout, /Dependency layer: cached: its virtualenv is reused/);
    assert.match(v2.stdout, /==> pip: cached virtualenv/);
    assert.doesNotMatch(v2.stdout, /Successfully installed|Processing /, "pip did not run");
    assert.deepEqual((await inFlight).body, { v: "1", dep: "1.0", secret: false });
    assert.equal((await call("hello")).body.v, "2");

    // Another app with the same dependencies reuses the virtualenv.
    const other = await deploy(await writeApp(join(root, "other"), "o"), "--app", "other");
    assert.equal(other.code, 0, other.stderr);
    assert.match(other.stdout, /==> pip: cached virtualenv/);
    assert.equal((await call("other")).body.v, "o");

    // Failed builds say why and leave version 2 serving.
    const failures: Array<[string, RegExp]> = [
      [`rp_missing_wheel = "9.9"\n`, /pip failed/],
      [`\n[build]\nshell_commands = ["echo building", "exit 7"]\n`, /`exit 7` exited with code 7/],
      [`\n[dependencies.apt]\ndefinitely-not-a-package-xyz = "*"\n`, /definitely-not-a-package-xyz is not installed/],
    ];
    for (const [index, [toml, reason]] of failures.entries()) {
      const failed = await deploy(await writeApp(join(root, `bad-${index}`), "bad", toml));
      assert.equal(failed.code, 1, failed.stdout);
      assert.match(failed.stderr, /Build failed: /);
      assert.match(failed.stderr + failed.stdout, reason);
      assert.equal((await call("hello")).body.v, "2", "the previous version still serves");
    }

    // Roll back to the first deployment.
    const list = await runMain(["deployments", "list", `${TEST_PROJECT}/hello`, "--json"], { env });
    const page = JSON.parse(list.stdout) as {
      deployments: Array<{ deployment_id: string; status: string; active: boolean }>;
    };
    assert.deepEqual(page.deployments.map((d) => d.status), ["failed", "failed", "failed", "ready", "ready"]);
    const first = page.deployments[4];
    const logs = await runMain(["deployments", "logs", `${TEST_PROJECT}/hello`, first.deployment_id], { env });
    assert.match(logs.stdout, /==> ready/);
    const activate = await runMain(["deployments", "activate", `${TEST_PROJECT}/hello`, first.deployment_id], { env });
    assert.equal(activate.code, 0, activate.stderr);
    assert.equal((await call("hello")).body.v, "1");

    // Apps: both listed as deployed; deleting one makes its calls 404.
    const apps = await runMain(["apps", "list", TEST_PROJECT], { env });
    assert.match(apps.stdout, /^APP +STATE +SOURCE +RUNTIME +ACTIVE DEPLOYMENT +REPLICAS\n/);
    assert.match(apps.stdout, /^hello +ready +deployment +python +dep_/m);
    assert.match(apps.stdout, /^other +ready +deployment/m);
    const got = await runMain(["apps", "get", `${TEST_PROJECT}/hello`], { env });
    assert.match(got.stdout, new RegExp(`active deployment: ${first.deployment_id}`));
    const deleted = await runMain(["apps", "delete", `${TEST_PROJECT}/other`, "--yes"], { env });
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.equal((await call("other")).status, 404);
  });

  it("records --message, the folder's git commit (dirty when an uploaded file differs), and the runs they serve", async () => {
    type Listed = { deployment_id: string; message: string | null; commit: string | null; dirty: boolean };
    const listed = async () => {
      const list = await runMain(["deployments", "list", `${TEST_PROJECT}/tracked`, "--json"], { env });
      return (JSON.parse(list.stdout) as { deployments: Listed[] }).deployments;
    };
    const dir = await writeApp(join(root, "tracked"), "t0");
    const untracked = await deploy(dir, "--app", "tracked");
    assert.equal(untracked.code, 0, untracked.stderr + untracked.stdout);
    assert.doesNotMatch(untracked.stdout, /at commit/);
    const [first] = await listed();
    assert.deepEqual([first.message, first.commit, first.dirty], [null, null, false]);

    await git(dir, "init", "--quiet", "--initial-branch=main");
    await git(dir, "add", "--all");
    await git(dir, "commit", "--quiet", "-m", "t0");
    const head = await git(dir, "rev-parse", "HEAD");
    // A change in a folder the bundle leaves out ([deployment] exclude) does not make it dirty.
    await writeFile(join(dir, "secrets", "key.txt"), "changed, and never uploaded");
    const clean = await deploy(dir, "--app", "tracked", "--message", "First cut\nwith details");
    assert.equal(clean.code, 0, clean.stderr + clean.stdout);
    assert.match(clean.stdout, new RegExp(`at commit ${head.slice(0, 7)}\n`));
    await writeFile(join(dir, "main.py"), `def run():\n    return {"v": "edited"}\n`);
    const dirty = await deploy(dir, "--app", "tracked");
    assert.equal(dirty.code, 0, dirty.stderr + dirty.stdout);
    assert.match(dirty.stdout, new RegExp(`at commit ${head.slice(0, 7)}-dirty\n`));

    const [newest, second] = await listed();
    assert.deepEqual([newest.message, newest.commit, newest.dirty], [null, head, true]);
    assert.deepEqual([second.message, second.commit, second.dirty], ["First cut\nwith details", head, false]);
    const table = await runMain(["deployments", "list", `${TEST_PROJECT}/tracked`], { env });
    assert.match(
      table.stdout,
      new RegExp(`^${newest.deployment_id} +ready +active +\\S+ +bundle@${head.slice(0, 7)}-dirty +- +-$`, "m"),
    );
    assert.match(
      table.stdout,
      new RegExp(`^${second.deployment_id} +ready +- +\\S+ +bundle@${head.slice(0, 7)} +First cut … +-$`, "m"),
    );

    // A run records the deployment that served it; runs get shows it.
    const response = await fetch(`${t.url}/v4/${TEST_PROJECT}/tracked/run`, {
      method: "POST",
      headers: { Authorization: `Bearer ${env.RUNPLANE_TOKEN}`, "Content-Type": "application/json" },
      body: "{}",
    });
    assert.deepEqual((await response.json()).result, { v: "edited" });
    const runId = response.headers.get("x-request-id")!;
    const got = await runMain(["runs", "get", `${TEST_PROJECT}/tracked`, runId], { env });
    assert.equal(got.code, 0, got.stderr);
    assert.match(got.stdout, new RegExp(`^deployment: ${newest.deployment_id}$`, "m"));
  });

  it("deploys a folder of a local mirror with --repo and --path", async () => {
    const repo = join(t.dataDir, "repos", TEST_PROJECT, "acme", "apps");
    await writeApp(join(repo, "services", "greeter"), "repo");
    await git(repo, "init", "--quiet", "--initial-branch=main");
    await git(repo, "add", "--all");
    await git(repo, "commit", "--quiet", "-m", "greeter");
    const outcome = await runMain([
      "deploy",
      "--repo",
      "acme/apps",
      "--path",
      "services/greeter",
      "--project",
      TEST_PROJECT,
      "--app",
      "greeter",
      "--message",
      "From the mirror",
    ], { env });
    assert.equal(outcome.code, 0, outcome.stderr + outcome.stdout);
    assert.equal((await call("greeter")).body.v, "repo");
    const json = await runMain(["deployments", "list", `${TEST_PROJECT}/greeter`, "--json"], { env });
    const [deployed] = (JSON.parse(json.stdout) as { deployments: Array<Record<string, unknown>> }).deployments;
    const head = await git(repo, "rev-parse", "HEAD");
    assert.deepEqual([deployed.message, deployed.commit, deployed.dirty], ["From the mirror", head, false]);
    const list = await runMain(["deployments", "list", `${TEST_PROJECT}/greeter`], { env });
    assert.match(list.stdout, /^DEPLOYMENT +STATUS +ACTIVE +CREATED +SOURCE +MESSAGE +ERROR\n/);
    assert.match(list.stdout, / ready +active +\S+ +acme\/apps@[0-9a-f]{7} +From the mirror +-$/m);
  });

  it("shows an upload progress bar on a terminal, and none when piped", async () => {
    const dir = await writeApp(join(root, "bar"), "bar");
    // 2 MiB that gzip cannot shrink: the upload takes several chunks.
    await writeFile(join(dir, "noise.bin"), randomBytes(2 * 1024 * 1024));
    const stderr = new CapturedOutput({ isTTY: true });
    const outcome = await runMain(["deploy", dir, "--project", TEST_PROJECT, "--app", "bar"], { env, stderr });
    assert.equal(outcome.code, 0, outcome.stderr + outcome.stdout);
    assert.match(stderr.text, /Uploading \[#{1,23} +\] +\d+% /);
    assert.match(stderr.text, /Uploading \[#{24}\] 100% 2\.\d MiB of 2\.\d MiB/);
    assert.equal((await call("bar")).body.v, "bar");
    assert.doesNotMatch(outcome.stdout, /Uploading/);
  });

  it("refuses usage errors with the command's help", async () => {
    // No --project and no token to take it from.
    const none = await runMain(["deploy", root], { env: { ...env, RUNPLANE_TOKEN: "" } });
    assert.equal(none.code, 2);
    assert.match(none.stderr, /deploy needs a project/);
    const both = await runMain(["deploy", root, "--repo", "a/b", "--project", "p"], { env });
    assert.equal(both.code, 2);
    const missing = await runMain(["deploy", join(root, "nope"), "--project", TEST_PROJECT], { env });
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /Cannot read .*runplane\.toml/);
  });
});
