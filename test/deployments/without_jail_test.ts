/**
 * Tenants' code never runs unjailed by accident: a server left at `RUNPLANE_SANDBOX=auto` on a host where
 * no jail works (bubblewrap hidden for real, in a mount namespace of the server's own) serves its apps
 * folder but refuses deployments (503 `sandbox-unavailable` naming what is missing), neither builds nor
 * serves the deployments already in its store, and says so in its banner and `/readyz`. With
 * `RUNPLANE_SANDBOX=off` the operator accepts unjailed deployments knowingly.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { bundleOf, type Deployment } from "../_helpers/deployments.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { withoutJail, type WithoutJail } from "../_helpers/sandbox.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startServerProcess,
} from "../_helpers/server_process.ts";
import { callRun } from "../_helpers/runs.ts";
import { waitFor } from "../_helpers/apps.ts";

const HELLO = {
  "runplane.toml": '[deployment]\nname = "hello"\n',
  "main.py": 'def hello(name="world"):\n    return "hello " + name\n',
};

type Problem = { type: string; status: number; title: string; detail?: string };
type SandboxReport = { setting: string; jailed: boolean; deployments: string; warnings: string[] };

/** POSTs a bundle of `HELLO` as app `appId`. */
async function postBundle(server: ServerProcess, appId: string): Promise<Response> {
  return await checkedFetch(`${server.url}/v3/projects/${PROCESS_PROJECT}/apps/${appId}/deployments`, {
    method: "POST",
    headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/gzip" },
    body: new Uint8Array(await bundleOf(HELLO)),
  });
}

/** `/readyz`'s sandbox report, once the server is ready (its apps loaded): a server without a jail is ready all the same. */
async function sandboxOf(server: ServerProcess): Promise<SandboxReport> {
  let response: Response | undefined;
  await waitFor(
    async () => (response = await checkedFetch(`${server.url}/readyz`)).status === 200,
    "readiness",
    60_000,
  );
  return ((await response!.json()) as { sandbox: SandboxReport }).sandbox;
}

/** Calls `hello` of app `app`: the response's status and the function's result (or the problem). */
async function callHello(server: ServerProcess, app: string): Promise<{ status: number; result: unknown }> {
  const { response, data, error } = await callRun({ client: server.client, project: PROCESS_PROJECT, app }, "hello");
  // A sync call's answer (not a stream's): its body is a RunResult.
  return { status: response.status, result: data ? (data as { result: unknown }).result : error };
}

function assertRefusal(problem: Problem, missing: RegExp): void {
  assert.equal(problem.status, 503);
  assert.equal(problem.type, "https://runplane.dev/problems/sandbox-unavailable");
  assert.match(problem.detail ?? "", /^Deployments are refused: this server cannot jail tenants' code/);
  assert.match(problem.detail ?? "", missing);
  assert.match(problem.detail ?? "", /set RUNPLANE_SANDBOX=off to accept unjailed deployments knowingly/);
}

describe("a server at RUNPLANE_SANDBOX=auto where no jail works", { timeout: 300_000 }, () => {
  let dirs: ServerDirs;
  let missing: WithoutJail | null;
  let failing: WithoutJail | null;
  const servers: ServerProcess[] = [];
  before(async () => {
    dirs = await makeServerDirs("runplane-no-jail-");
    await dirs.deploy("folder-app", HELLO);
    missing = await withoutJail("the refusal of deployments without a jail", { how: "missing", dir: dirs.root });
    failing = await withoutJail("the refusal of deployments without a jail", { how: "failing", dir: dirs.root });
  });
  after(async () => {
    for (const server of servers) await server.kill();
    await dirs?.remove();
  });

  /** A server on `dirs` without a jail (`taken`), with `sandbox` as RUNPLANE_SANDBOX. */
  async function start(taken: WithoutJail, sandbox: string, options: { token?: string } = {}): Promise<ServerProcess> {
    const server = await startServerProcess({ ...dirs.env, ...taken.env, RUNPLANE_SANDBOX: sandbox }, {
      wrap: taken.wrap,
      token: options.token,
    });
    servers.push(server);
    return server;
  }

  it("with bubblewrap missing: refuses deployments naming it, serves the apps folder, and says so in its banner and /readyz", async (t) => {
    if (!missing) return t.skip("mount namespaces cannot be made here");
    const server = await start(missing, "auto");

    const upload = await postBundle(server, "tenant-app");
    assertRefusal((await upload.json()) as Problem, /bubblewrap is missing \(apt-get install bubblewrap\)/);
    const fromRepository = await checkedFetch(
      `${server.url}/v3/projects/${PROCESS_PROJECT}/apps/tenant-app/deployments`,
      {
        method: "POST",
        headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
        body: JSON.stringify({ source: { owner: "someone", repo: "something" } }),
      },
    );
    assertRefusal((await fromRepository.json()) as Problem, /bubblewrap is missing/);

    assert.deepEqual(await callHello(server, "folder-app"), { status: 200, result: "hello world" });

    const sandbox = await sandboxOf(server);
    assert.equal(sandbox.setting, "auto");
    assert.equal(sandbox.jailed, false);
    assert.equal(sandbox.deployments, "refused");
    assert.ok(sandbox.warnings.some((w) => /bubblewrap is missing/.test(w)), sandbox.warnings.join("; "));
    assert.ok(sandbox.warnings.some((w) => /^Deployments are refused/.test(w)), sandbox.warnings.join("; "));

    const banner = server.banner();
    assert.match(banner, /NO SANDBOX: tenants' code would run UNJAILED/);
    assert.match(banner, /deployments are REFUSED \(503 sandbox-unavailable\)/);
    assert.match(banner, /bubblewrap is missing \(apt-get install bubblewrap\)/);
    assert.match(banner, /RUNPLANE_SANDBOX=off to accept unjailed deployments knowingly/);
  });

  it("with a bubblewrap that cannot start a jail: refuses deployments, naming why", async (t) => {
    if (!failing) return t.skip("mount namespaces cannot be made here");
    const server = await start(failing, "auto", { token: servers[0]?.token });
    const upload = await postBundle(server, "tenant-app");
    assertRefusal(
      (await upload.json()) as Problem,
      /bubblewrap cannot start a jail here \(bwrap: this one never works\)/,
    );
    assert.equal((await sandboxOf(server)).deployments, "refused");
  });

  it("with RUNPLANE_SANDBOX=off: accepts a deployment; restarted at auto, neither builds nor serves it", async (t) => {
    if (!missing) return t.skip("mount namespaces cannot be made here");
    const off = await start(missing, "off", { token: servers[0]?.token });
    assert.equal((await sandboxOf(off)).deployments, "accepted");
    const upload = await postBundle(off, "tenant-app");
    assert.equal(upload.status, 202, await upload.clone().text());
    const deployment = (await upload.json()) as Deployment;
    await waitFor(async () => (await callHello(off, "tenant-app")).status === 200, "the deployment to serve", 120_000);
    assert.ok(deployment.deployment_id);
    await off.kill();

    // The store holds a ready, active deployment: a server that cannot jail it leaves it alone.
    const auto = await start(missing, "auto", { token: off.token });
    assert.equal((await callHello(auto, "tenant-app")).status, 404);
    assert.deepEqual(await callHello(auto, "folder-app"), { status: 200, result: "hello world" });
    assert.ok(
      auto.logs.some((l) => /deployments already in the store are neither built nor served here/.test(String(l.msg))),
      "the start log says so",
    );
  });
});
