/**
 * A deployment is `ready` only when it serves (issue 44): its main.py imported in a replica started under
 * the app's jail and limits, or its custom server's `readycheck_endpoint` answered, on the host that built
 * it. Otherwise the build fails with the traceback (or the server's last output) in its log, `runplane
 * deploy` exits 1, and the previous deployment goes on serving; an app none of whose deployments serves
 * answers 503 `app-unavailable` naming the failed one.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { callFunction, deployApp, waitFor } from "../_helpers/apps.ts";
import { runMain } from "../_helpers/cli.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

type Problem = { type: string; status: number; detail?: string };

/** A custom server: its `/ready` answers 503 until `readyAfter` seconds after it started (never when null). */
function customServer(readyAfter: number | null): string {
  return `import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

STARTED = time.monotonic()
READY_AFTER = ${readyAfter ?? "None"}

def ready():
    return READY_AFTER is not None and time.monotonic() - STARTED >= READY_AFTER

class Handler(BaseHTTPRequestHandler):
    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/ready":
            return self.answer(200 if ready() else 503, {})
        self.answer(200, {})

    def do_POST(self):
        self.answer(200, {"ready": ready()})

    def log_message(self, *args):
        pass

print("loading the model", flush=True)
HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
`;
}

function customApp(readyAfter: number | null, scaling = ""): Record<string, string> {
  return {
    "runplane.toml": `[deployment]\nruntime = "custom"\n\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n`
      + `readycheck_endpoint = "/ready"\n${scaling}`,
    "server.py": customServer(readyAfter),
  };
}

describe("a deployment is ready only when it serves", () => {
  let t: TestServer;
  let root: string;
  let token: string;
  let env: Record<string, string>;

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-ready-serving-"));
    // A replica asking for the whole host fits only while no other replica runs (see the last test).
    t = await startTestServer({ env: { RUNPLANE_HOST_CPU: "4" } });
    token = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
    env = { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: token };
  });
  after(async () => {
    await t?.close();
    await rm(root, { recursive: true, force: true });
  });

  /** Writes an app folder and deploys it with `runplane deploy`. */
  async function deployWithCli(app: string, files: Record<string, string>) {
    const dir = join(root, `${app}-${Date.now()}`);
    await mkdir(dir, { recursive: true });
    for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
    return await runMain(["deploy", dir, "--project", TEST_PROJECT, "--app", app], { env });
  }

  async function deployments(app: string) {
    const list = await runMain(["deployments", "list", `${TEST_PROJECT}/${app}`, "--json"], { env });
    return (JSON.parse(list.stdout) as {
      deployments: Array<{ deployment_id: string; status: string; active: boolean; error: string | null }>;
    }).deployments;
  }

  /** Deploys a Python app over the REST API (as `runplane deploy` does) and follows its build to the end. */
  async function deployPython(app: string, files: { toml?: string; main: string }) {
    const bundle = await bundleOf({ "runplane.toml": `[deployment]\n\n${files.toml ?? ""}`, "main.py": files.main });
    return await deployBundle(t, app, bundle, token);
  }

  /** The app's replicas alive on the server, whatever their state. */
  async function replicaCount(app: string): Promise<number> {
    const { data } = await t.client.GET("/v3/projects/{project_id}/apps/{app_id}", {
      params: { path: { project_id: TEST_PROJECT, app_id: app } },
    });
    const { idle, busy, starting } = data!.replicas;
    return idle + busy + starting;
  }

  async function version(app: string): Promise<unknown> {
    const { response, data } = await callFunction(t, app, "run");
    return response.status === 200 ? data!.result : `status ${response.status}`;
  }

  it("fails a deploy whose main.py imports a missing package, or has a syntax error; the previous one serves", {
    timeout: 180_000,
  }, async () => {
    const good = await deployWithCli("served", {
      "runplane.toml": `[deployment]\nname = "served"\n`,
      "main.py": `def run():\n    return "v1"\n`,
    });
    assert.equal(good.code, 0, good.stderr + good.stdout);
    assert.equal(await version("served"), "v1");

    const missing = await deployWithCli("served", {
      "runplane.toml": `[deployment]\nname = "served"\n`,
      "main.py": `import not_installed\n\ndef run():\n    return "v2"\n`,
    });
    assert.equal(missing.code, 1, missing.stdout);
    assert.match(
      missing.stderr,
      /Build failed: .*main\.py failed to load: ModuleNotFoundError: No module named 'not_installed'/,
    );
    assert.match(missing.stdout, /Traceback \(most recent call last\)/);
    assert.match(missing.stdout, /import not_installed/);
    assert.match(missing.stdout, /the deployment serving before goes on serving/);
    assert.equal(await version("served"), "v1", "the previous deployment still answers");

    const syntax = await deployWithCli("served", {
      "runplane.toml": `[deployment]\nname = "served"\n`,
      "main.py": `def run(:\n    return "v3"\n`,
    });
    assert.equal(syntax.code, 1, syntax.stdout);
    assert.match(syntax.stderr, /Build failed: .*main\.py failed to load: SyntaxError/);
    assert.match(syntax.stdout, /def run\(:/, "the log shows the line");
    assert.equal(await version("served"), "v1", "the previous deployment still answers");

    const [newest, second, first] = await deployments("served");
    assert.deepEqual([newest.status, second.status, first.status], ["failed", "failed", "ready"]);
    assert.ok(first.active, "the first deployment is still the active one");
    const log = await runMain(["deployments", "logs", `${TEST_PROJECT}/served`, second.deployment_id], { env });
    assert.match(
      log.stdout,
      /ModuleNotFoundError: No module named 'not_installed'/,
      "the traceback is kept in the build log",
    );
  });

  it("answers 503 app-unavailable naming the failed deployment when the app's only deployment failed", {
    timeout: 120_000,
  }, async () => {
    const end = await deployPython("broken", { main: "raise RuntimeError('no config')\n" });
    assert.equal(end.status, "failed", end.lines.join("\n"));
    assert.match(end.error ?? "", /RuntimeError: no config/);
    assert.ok(end.lines.some((line) => line.includes("503 app-unavailable")), end.lines.join("\n"));
    const { response, error } = await callFunction(t, "broken", "run");
    const problem = error as Problem;
    assert.equal(response.status, 503, JSON.stringify(problem));
    assert.equal(problem.type, "https://runplane.dev/problems/app-unavailable");
    assert.match(problem.detail ?? "", new RegExp(`deployment ${end.deployment_id} failed: .*RuntimeError: no config`));
    const apps = await runMain(["apps", "get", `${TEST_PROJECT}/broken`], { env });
    assert.match(apps.stdout, /failed/);
  });

  it("keeps the replica that was checked warm for the first call, and lets it go after the cooldown", {
    timeout: 120_000,
  }, async () => {
    const end = await deployPython("cooled", {
      toml: "[scaling]\nmin_replicas = 0\ncooldown = 2\n",
      main: "def run():\n    return 'warm'\n",
    });
    assert.equal(end.status, "ready", end.lines.join("\n"));
    assert.ok(end.lines.some((line) => line.includes("==> the replica serves")), end.lines.join("\n"));
    assert.equal(await replicaCount("cooled"), 1, "the replica started for the check is kept");
    assert.equal(await version("cooled"), "warm");
    const starts = t.logs.filter((line) => line.msg === "replica starting" && line.app === `${TEST_PROJECT}/cooled`);
    assert.equal(starts.length, 1, "the first call took the replica started for the check: no second start");
    await waitFor(async () => (await replicaCount("cooled")) === 0, "the replica to stop after the cooldown", 30_000);
  });

  it("routes no call to a custom server before its readycheck_endpoint answers", { timeout: 120_000 }, async () => {
    const end = await deployBundle(
      t,
      "slow",
      await bundleOf(customApp(3, "\n[scaling]\nmin_replicas = 0\ncooldown = 1\n")),
      token,
    );
    assert.equal(end.status, "ready", end.lines.join("\n"));
    assert.deepEqual(await version("slow"), { ready: true }, "the first call after ready");
    // Once the checked replica is gone, a call starts a new one: it waits for that one's readycheck too.
    await waitFor(async () => (await replicaCount("slow")) === 0, "the replica to stop after the cooldown", 30_000);
    assert.deepEqual(await version("slow"), { ready: true }, "a call to a new replica");
  });

  it("fails the deploy of a custom server whose readycheck_endpoint never answers, with its last output", {
    timeout: 120_000,
  }, async () => {
    const end = await deployBundle(t, "never", await bundleOf(customApp(null)), token);
    assert.equal(end.status, "failed", end.lines.join("\n"));
    assert.match(end.error ?? "", /readycheck_endpoint \/ready did not answer 2xx/);
    assert.ok(end.lines.includes("loading the model"), `the server's output is in the log: ${end.lines.join("\n")}`);
    const { response } = await callFunction(t, "never", "run");
    assert.equal(response.status, 503);
  });

  it("skips the check, saying why, when no replica of the app fits the host now", { timeout: 120_000 }, async () => {
    // The apps folder's app keeps a replica; one of `hungry` needs every core of the host.
    await deployApp(t, "holder", {
      toml: "[scaling]\nmin_replicas = 1\n\n[hardware]\ncpu = 0.5\n",
      files: { "main.py": "def run():\n    return 'holder'\n" },
    });
    await t.server.context.runtime.warm();
    const end = await deployPython("hungry", { toml: "[hardware]\ncpu = 4\n", main: "def run():\n    return 1\n" });
    assert.equal(end.status, "ready", end.lines.join("\n"));
    assert.ok(
      end.lines.some((line) => /==> not started: no replica of it fits this host now/.test(line)),
      end.lines.join("\n"),
    );
  });
});
