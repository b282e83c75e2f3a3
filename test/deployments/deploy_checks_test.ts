import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { packBundle } from "../../client/bundle.ts";
import { waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { writeWheel } from "../_helpers/wheels.ts";

type Deployment = { deployment_id: string; status: string; error: string | null };
type Problem = { type: string; status: number; detail: string; errors?: Array<{ path: string; message: string }> };

/** A listener on the host's loopback that counts what reaches it and answers like an internal service. */
async function startLoopbackService(): Promise<{ server: Server; port: number; hits: string[] }> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    req.resume();
    res.setHeader("Content-Type", "application/json");
    res.end(JSON.stringify({ secret: "internal-admin-data" }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as AddressInfo).port, hits };
}

async function bundleOf(files: Record<string, string>): Promise<Uint8Array> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-bundle-"));
  try {
    for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
    return (await packBundle(dir)).bytes;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function urlApp(url: string): Record<string, string> {
  return { "runplane.toml": `[deployment]\nruntime = "custom"\n[runtime.custom]\nurl = "${url}"\n` };
}

function pythonApp(toml: string): Record<string, string> {
  return {
    "runplane.toml": `[deployment]\nname = "checked"\n${toml}`,
    "main.py": "import os\n\ndef run():\n    return {'ok': True}\n",
  };
}

/** A client of one test server's deploy and run APIs. */
function client(t: () => TestServer, token: () => string) {
  async function request(path: string, init: RequestInit = {}): Promise<Response> {
    return await checkedFetch(`${t().url}${path}`, {
      ...init,
      headers: { Authorization: `Bearer ${token()}`, ...init.headers },
    });
  }
  return {
    async deploy(appId: string, files: Record<string, string>): Promise<Response> {
      return await request(`/v3/projects/${TEST_PROJECT}/apps/${appId}/deployments`, {
        method: "POST",
        headers: { "Content-Type": "application/gzip" },
        body: new Uint8Array(await bundleOf(files)),
      });
    },
    async waitBuilt(appId: string, id: string): Promise<Deployment> {
      for (const started = Date.now(); Date.now() - started < 60_000;) {
        const response = await request(`/v3/projects/${TEST_PROJECT}/apps/${appId}/deployments/${id}`);
        const deployment = (await response.json()) as Deployment;
        if (deployment.status === "ready" || deployment.status === "failed") return deployment;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      throw new Error(`deployment ${id} did not finish building`);
    },
    async call(appId: string, fn = "run"): Promise<Response> {
      return await request(`/v4/${TEST_PROJECT}/${appId}/${fn}`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: "{}",
      });
    },
  };
}

async function refusal(response: Response): Promise<Problem> {
  const problem = (await response.json()) as Problem;
  assert.equal(response.status, 400, JSON.stringify(problem));
  assert.equal(problem.errors?.[0]?.path, "body.runplane.toml");
  return problem;
}

describe("a deployed app's runplane.toml is checked before anything is stored or built", () => {
  let t: TestServer;
  let token: string;
  let root: string;
  let loopback: Awaited<ReturnType<typeof startLoopbackService>>;
  const api = client(() => t, () => token);

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-deploy-checks-"));
    const wheels = join(root, "wheels");
    await mkdir(wheels);
    writeWheel(wheels, "rp_checkdep", "1.5");
    t = await startTestServer({ env: { RUNPLANE_PIP_FIND_LINKS: wheels } });
    token = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
    loopback = await startLoopbackService();
  });
  after(async () => {
    await t?.close();
    loopback?.server.close();
    await rm(root, { recursive: true, force: true });
  });

  async function notStored(appId: string): Promise<void> {
    const listed = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/${appId}/deployments`, {
      headers: { Authorization: `Bearer ${token}` },
    });
    assert.equal(listed.status, 404, "no deployment was stored");
  }

  it("refuses a custom runtime url at a host-loopback service with 400 naming the key and the setting; the service hears nothing", async () => {
    const response = await api.deploy("admin", urlApp(`http://127.0.0.1:${loopback.port}/internal-admin`));
    const problem = await refusal(response);
    assert.match(problem.detail, /runtime\.custom\.url/);
    assert.match(problem.detail, /RUNPLANE_ALLOW_EXTERNAL_RUNTIMES/);
    await notStored("admin");
    assert.equal((await api.call("admin", "x")).status, 404);
    assert.deepEqual(loopback.hits, []);
  });

  it("refuses a pip entry that is a pip option with 400 naming the entry", async () => {
    const response = await api.deploy(
      "pipopt",
      pythonApp('[dependencies.pip]\n"--index-url=http://10.0.0.1/" = "*"\n'),
    );
    const problem = await refusal(response);
    assert.match(problem.detail, /dependencies\.pip\."--index-url=http:\/\/10\.0\.0\.1\/" is not a package name/);
    await notStored("pipopt");
  });

  it("refuses a pip entry that is a URL with 400 naming the entry", async () => {
    const byVersion = await refusal(
      await api.deploy("pipurl", pythonApp('[dependencies.pip]\nevil = "@ https://example.com/evil.whl"\n')),
    );
    assert.match(byVersion.detail, /dependencies\.pip\.evil has version "@ https:\/\/example\.com\/evil\.whl"/);
    const byName = await refusal(
      await api.deploy("pipurl", pythonApp('[dependencies.pip]\n"git+https://example.com/evil.git" = "*"\n')),
    );
    assert.match(byName.detail, /dependencies\.pip\."git\+https:\/\/example\.com\/evil\.git" is not a package name/);
    await notStored("pipurl");
  });

  it("refuses apt and conda entries that are not package names with 400 naming the entry", async () => {
    const apt = await refusal(
      await api.deploy("aptbad", pythonApp('[dependencies.apt]\n"-oDebug::pkgDPkgPm=1" = "*"\n')),
    );
    assert.match(apt.detail, /dependencies\.apt\."-oDebug::pkgDPkgPm=1" is not a Debian package name/);
    const conda = await refusal(await api.deploy("condabad", pythonApp('[dependencies.conda]\n"numpy;id" = "*"\n')));
    assert.match(conda.detail, /dependencies\.conda\."numpy;id" is not a conda package name/);
    await notStored("aptbad");
    await notStored("condabad");
  });

  it("refuses an [env] variable of the platform's with 400 naming it", async () => {
    const problem = await refusal(await api.deploy("envbad", pythonApp('[env]\nRUNPLANE_MASTER_KEY = "x"\n')));
    assert.match(problem.detail, /env\.RUNPLANE_MASTER_KEY is reserved/);
    await notStored("envbad");
  });

  it("refuses a bad [hardware] value with 400 naming the key", async () => {
    const cpu = await refusal(await api.deploy("hwbad", pythonApp("[hardware]\ncpu = 0\n")));
    assert.match(cpu.detail, /hardware\.cpu must be a number of cores from 0\.05 to 256, got 0/);
    const memory = await refusal(await api.deploy("hwbad", pythonApp('[hardware]\nmemory = "lots"\n')));
    assert.match(memory.detail, /hardware\.memory must be a number of GiB/);
    const gpus = await refusal(await api.deploy("hwbad", pythonApp("[hardware]\ngpu_count = 2.5\n")));
    assert.match(gpus.detail, /hardware\.gpu_count must be a whole number/);
    const compute = await refusal(await api.deploy("hwbad", pythonApp('[hardware]\ncompute = "CPU"\ngpu_count = 1\n')));
    assert.match(compute.detail, /hardware\.compute = "CPU" asks for no GPU/);
    await notStored("hwbad");
  });

  it("accepts pip names with version specifiers, [env] and [network], and builds them", async () => {
    // Accepted; its build stops at a failing pre-build command, before pip (no index here, and no
    // virtualenv made for nothing).
    const accepted = await api.deploy(
      "good",
      pythonApp('[dependencies.pip]\nrequests = ">=2,<3"\n[build]\npre_build_commands = ["exit 3"]\n'),
    );
    assert.equal(accepted.status, 202, await accepted.clone().text());
    const tried = await api.waitBuilt("good", ((await accepted.json()) as Deployment).deployment_id);
    assert.equal(tried.status, "failed");
    assert.match(tried.error ?? "", /`exit 3` exited with code 3/);

    const response = await api.deploy(
      "good2",
      pythonApp(
        '[dependencies.pip]\nrp_checkdep = ">=1,<2"\n[env]\nMODEL = "small"\n[network]\negress = false\n'
          + "[hardware]\ncpu = 0.5\nmemory = 0.5\n",
      ),
    );
    assert.equal(response.status, 202, await response.clone().text());
    const built = await api.waitBuilt("good2", ((await response.json()) as Deployment).deployment_id);
    assert.equal(built.status, "ready", built.error ?? "");
    // Ready in the store comes a moment before this process serves it.
    const served = () => t.server.context.runtime.apps(TEST_PROJECT).find((a) => a.name === "good2")?.config;
    await waitFor(() => served() !== undefined, "good2 to be served");
    const config = served();
    assert.deepEqual(config?.env, { MODEL: "small" });
    assert.equal(config?.egress, false);
    assert.deepEqual(config?.hardware, { cpu: 0.5, memoryBytes: 512 * 1024 ** 2, gpuCount: 0 });
  });
});

describe("a deployed custom runtime url with RUNPLANE_ALLOW_EXTERNAL_RUNTIMES", () => {
  let loopback: Awaited<ReturnType<typeof startLoopbackService>>;
  let dataDir: string;

  before(async () => {
    loopback = await startLoopbackService();
    dataDir = await mkdtemp(join(tmpdir(), "runplane-external-"));
  });
  after(async () => {
    loopback?.server.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  async function serve(env: Record<string, string>) {
    const t = await startTestServer({ dataDir, env });
    const token = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
    // A deployment is served a moment after it is ready in the store (at a restart, once read from it).
    const served = (appId: string) =>
      waitFor(() => t.server.context.deployments.deployedApps().some((a) => a.name === appId), `${appId} to be read`);
    return { t, api: client(() => t, () => token), served };
  }

  it("deploys, but a call to a host-loopback address is refused at connect time (502 saying why) and the service hears nothing", async () => {
    const { t, api, served } = await serve({ RUNPLANE_ALLOW_EXTERNAL_RUNTIMES: "1" });
    try {
      for (const host of ["127.0.0.1", "localhost"]) {
        const appId = host === "localhost" ? "byname" : "byaddress";
        const response = await api.deploy(appId, urlApp(`http://${host}:${loopback.port}/internal-admin`));
        assert.equal(response.status, 202, await response.clone().text());
        const built = await api.waitBuilt(appId, ((await response.json()) as Deployment).deployment_id);
        assert.equal(built.status, "ready", built.error ?? "");
        await served(appId);
        const call = await api.call(appId);
        const text = await call.text();
        assert.equal(call.status, 502, text);
        const problem = JSON.parse(text) as Problem;
        assert.match(problem.detail, /runtime\.custom\.url was not called: .*loopback/);
        assert.match(problem.detail, /RUNPLANE_WEBHOOK_ALLOW_PRIVATE/);
        assert.doesNotMatch(text, /internal-admin-data/);
      }
      assert.deepEqual(loopback.hits, []);
    } finally {
      await t.close();
    }
  });

  it("reaches the address once RUNPLANE_WEBHOOK_ALLOW_PRIVATE allows it, and stops loading when the setting is taken back", async () => {
    const allowed = await serve({ RUNPLANE_ALLOW_EXTERNAL_RUNTIMES: "1", RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" });
    try {
      await allowed.served("byaddress");
      const call = await allowed.api.call("byaddress");
      const text = await call.text();
      assert.equal(call.status, 200, text);
      assert.deepEqual((JSON.parse(text) as { result: unknown }).result, { secret: "internal-admin-data" });
      assert.deepEqual(loopback.hits, ["POST /internal-admin/run"]);
    } finally {
      await allowed.t.close();
    }
    const refused = await serve({});
    try {
      await refused.served("byaddress");
      const call = await refused.api.call("byaddress");
      const text = await call.text();
      assert.equal(call.status, 503, text);
      assert.match((JSON.parse(text) as Problem).detail, /runtime\.custom\.url .*RUNPLANE_ALLOW_EXTERNAL_RUNTIMES/);
      assert.deepEqual(loopback.hits, ["POST /internal-admin/run"], "nothing more reached the service");
    } finally {
      await refused.t.close();
    }
  });
});
