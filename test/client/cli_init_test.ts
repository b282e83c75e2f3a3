/**
 * `runplane init` writes an app a newcomer can deploy at once, never over their files; the deploy that
 * follows prints a curl whose body the function accepts. Answers the CLI gets pass a contract-checking
 * proxy.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { runMain } from "../_helpers/cli.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { type FaultProxy, startFaultProxy } from "./_fault_proxy.ts";

describe("runplane init", { timeout: 300_000 }, () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-init-"));
  });
  after(() => rm(root, { recursive: true, force: true }));

  it("writes runplane.toml, a main.py with a sync and a streaming function, and a README into a new folder", async () => {
    const outcome = await runMain(["init", "greeter"], { cwd: root });
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.equal(
      outcome.stdout,
      "Created app greeter in greeter: runplane.toml, main.py, README.md\n"
        + "Deploy it into your token's project: p-demo for the demo token npm start printed:\n  runplane deploy greeter\n",
    );
    // With a token at hand, its project by name.
    const claims = Buffer.from(JSON.stringify({ project_id: "p-team" })).toString("base64url");
    const named = await runMain(["init", "named"], { cwd: root, env: { RUNPLANE_TOKEN: `e30.${claims}.sig` } });
    assert.match(named.stdout, /Deploy it into project p-team, your token's:\n {2}runplane deploy named\n/);
    const dir = join(root, "greeter");
    assert.deepEqual((await readdir(dir)).sort(), ["README.md", "main.py", "runplane.toml"]);
    assert.match(await readFile(join(dir, "runplane.toml"), "utf8"), /^\[deployment\]\nname = "greeter"$/m);
    const main = await readFile(join(dir, "main.py"), "utf8");
    assert.match(main, /^def run\(name: str, greeting: str = "Hello"\) -> dict:$/m);
    assert.match(main, /^def count\(to: int = 3\):\n(?:.*\n)*? +yield /m);
    assert.match(await readFile(join(dir, "README.md"), "utf8"), /^# greeter\n/);
  });

  it("refuses, writing nothing, when any of its files exists; takes --name for a folder that is no app name", async () => {
    const dir = join(root, "taken");
    await mkdir(dir);
    await writeFile(join(dir, "README.md"), "mine\n");
    const refused = await runMain(["init", dir]);
    assert.equal(refused.code, 1);
    assert.equal(
      refused.stderr,
      `runplane init: ${dir} already has README.md: nothing was written; choose an empty folder\n`,
    );
    assert.deepEqual(await readdir(dir), ["README.md"]);
    assert.equal(await readFile(join(dir, "README.md"), "utf8"), "mine\n");
    const again = await runMain(["init", join(root, "greeter")]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /already has runplane\.toml, main\.py, README\.md: nothing was written/);

    const odd = join(root, "my app");
    const badName = await runMain(["init", odd]);
    assert.equal(badName.code, 2);
    assert.match(badName.stderr, /"my app" is not an app name .*: pass --name <app>/);
    const named = await runMain(["init", odd, "--name", "my-app"]);
    assert.equal(named.code, 0, named.stderr);
    assert.match(await readFile(join(odd, "runplane.toml"), "utf8"), /name = "my-app"/);
  });

  describe("deployed", () => {
    let t: TestServer;
    let proxy: FaultProxy;
    let env: Record<string, string>;
    before(async () => {
      t = await startTestServer();
      proxy = await startFaultProxy(t.url, { fault: () => undefined });
      const { token } = await t.mintToken({ scopes: ["deploy", "rest", "run"] });
      env = { RUNPLANE_BASE_URL: proxy.url, RUNPLANE_TOKEN: token };
    });
    after(async () => {
      await proxy?.close();
      await t?.close();
    });

    it("deploys as it is; the printed curl's body is built from run's parameters and is accepted", async () => {
      const deployed = await runMain(["deploy", join(root, "greeter"), "--project", TEST_PROJECT], { env });
      assert.equal(deployed.code, 0, deployed.stderr + deployed.stdout);
      const curl = /curl -X POST (\S+) \\\n.* -d '(\{.*\})'  # optional: greeting\n$/.exec(deployed.stdout);
      assert.ok(curl, deployed.stdout);
      assert.equal(curl[1], `${proxy.url}/v4/${TEST_PROJECT}/greeter/run`);
      assert.deepEqual(JSON.parse(curl[2]), { name: "text" });
      // The body as printed, sent as curl would (to the server itself: the proxy is the CLI's).
      const answer = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/greeter/run`, {
        method: "POST",
        headers: { Authorization: `Bearer ${env.RUNPLANE_TOKEN}`, "Content-Type": "application/json" },
        body: curl[2],
      });
      assert.equal(answer.status, 200);
      assert.deepEqual(((await answer.json()) as { result: unknown }).result, { message: "Hello, text!" });
    });

    it("serves both functions: run answers once, count streams", async () => {
      const ran = await runMain(["run", `${TEST_PROJECT}/greeter`, "--data", '{"name": "Ada"}'], { env });
      assert.equal(ran.code, 0, ran.stderr);
      assert.deepEqual(JSON.parse(ran.stdout), { message: "Hello, Ada!" });
      const streamed = await runMain(["run", `${TEST_PROJECT}/greeter/count`, "--stream"], { env });
      assert.equal(streamed.code, 0, streamed.stderr);
      assert.equal(streamed.stdout, '{"n":1}\n{"n":2}\n{"n":3}\n');
      const redeployed = await runMain(
        ["deploy", join(root, "greeter"), "--project", TEST_PROJECT, "--function", "count"],
        { env },
      );
      assert.equal(redeployed.code, 0, redeployed.stderr);
      assert.match(redeployed.stdout, /\/greeter\/count \\\n.* -d '\{\}'  # optional: to\n$/);
    });

    it("takes the token's project where --project (or the target's project) is left out", async () => {
      const deployed = await runMain(["deploy", join(root, "greeter"), "--message", "no project named"], { env });
      assert.equal(deployed.code, 0, deployed.stderr + deployed.stdout);
      assert.match(deployed.stdout, new RegExp(`Ready: ${TEST_PROJECT}/greeter serves deployment`));
      const apps = await runMain(["apps", "list"], { env });
      assert.equal(apps.code, 0, apps.stderr);
      assert.match(apps.stdout, /^greeter +ready /m);
      const app = await runMain(["apps", "get", "greeter"], { env });
      assert.match(app.stdout, new RegExp(`^${TEST_PROJECT}/greeter ready`));
      const deployments = await runMain(["deployments", "list", "greeter", "--json"], { env });
      assert.equal(deployments.code, 0, deployments.stderr);
      const page = JSON.parse(deployments.stdout) as { deployments: Array<{ message: string | null }> };
      assert.equal(page.deployments[0].message, "no project named");
      const ran = await runMain(["run", "greeter", "--data", '{"name": "Bo"}'], { env });
      assert.deepEqual(JSON.parse(ran.stdout), { message: "Hello, Bo!" });
      const queued = await runMain(["run", "greeter", "--async", "--wait", "--json", "--data", '{"name": "Cy"}'], {
        env,
      });
      assert.equal(queued.code, 0, queued.stderr);
      const runId = (JSON.parse(queued.stdout) as { run_id: string }).run_id;
      const runs = await runMain(["runs", "list", "--json"], { env });
      assert.equal(runs.code, 0, runs.stderr);
      assert.ok(
        (JSON.parse(runs.stdout) as { runs: Array<{ run_id: string }> }).runs.some((run) => run.run_id === runId),
        runs.stdout,
      );
      const got = await runMain(["runs", "get", "greeter", runId], { env });
      assert.equal(got.code, 0, got.stderr);
      assert.match(got.stdout, new RegExp(runId));
      // A project the token does not belong to, named: the server's 403, whatever the CLI defaults.
      for (const args of [["deploy", join(root, "greeter"), "--project", "p-other"], ["apps", "list", "p-other"]]) {
        const refused = await runMain(args, { env });
        assert.equal(refused.code, 1, args.join(" "));
        assert.match(refused.stderr, /Forbidden/, args.join(" "));
      }
      const tokenless = await runMain(["deploy", join(root, "greeter")], { env: { RUNPLANE_BASE_URL: proxy.url } });
      assert.equal(tokenless.code, 2);
      assert.match(tokenless.stderr, /deploy needs a project \(--project <id>, or in its target\), or a token/);
    });

    it("got only answers that match the contract", async () => {
      assert.ok(proxy.seen.length > 5, `the proxy saw ${proxy.seen.length} requests`);
      assert.deepEqual(await proxy.contractErrors(), []);
    });
  });
});
