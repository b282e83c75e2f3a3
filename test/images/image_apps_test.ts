/**
 * Apps with `[build] base_image`, end to end on a real server: the image pulled from a registry of the
 * test's own on loopback (Debian's docker-registry, holding a Debian trixie image with Python 3.13 made by
 * mmdebstrap), its root the `/` of every build step and replica, in the same jail as any app. The host is
 * Debian bookworm with Python 3.11, so what a replica reports tells the image's system from the host's.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { packBundle } from "../../client/bundle.ts";
import { runMain } from "../_helpers/cli.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import {
  BASE_IMAGE_TAG,
  imageToolsWork,
  startTestRegistry,
  type TestRegistry,
  testBaseImage,
} from "../_helpers/images.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

type Deployment = {
  deployment_id: string;
  status: string;
  error: string | null;
  image: { reference: string; digest: string } | null;
};
type Problem = { status: number; detail: string; errors?: Array<{ path: string; message: string }> };

const IMAGE_NAME = "runplane-test/trixie:python3";

/** What a replica tells of the system it runs on. */
const REPORTING_APP = `import os, platform, subprocess, sys

def run():
    with open("/etc/os-release") as f:
        release = dict(line.rstrip("\\n").split("=", 1) for line in f if "=" in line)
    with open("built.txt") as f:
        built = f.read().strip()
    return {
        "codename": release.get("VERSION_CODENAME"),
        "python": platform.python_version(),
        "python3": subprocess.run(["python3", "--version"], capture_output=True, text=True).stdout.strip(),
        "executable": sys.executable,
        "uid": os.getuid(),
        "image_env": os.environ.get("IMAGE_GREETING"),
        "left_out": [n for n in ("LD_PRELOAD", "RUNPLANE_TEST_IMAGE") if n in os.environ],
        "app_env": os.environ.get("GREETING"),
        "built": built,
        "usr_writable": os.access("/usr", os.W_OK),
    }
`;

async function bundleOf(files: Record<string, string>): Promise<Uint8Array> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-image-bundle-"));
  try {
    for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
    return (await packBundle(dir)).bytes;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function imageApp(reference: string, extra = ""): Record<string, string> {
  return {
    "runplane.toml": `[deployment]\nname = "imaged"\n[build]\nbase_image = "${reference}"\n`
      // Runs in the image too: the file it writes says which system the build step saw.
      + `shell_commands = ["grep VERSION_CODENAME /etc/os-release > built.txt"]\n`
      + `[env]\nGREETING = "hello"\n${extra}`,
    "main.py": REPORTING_APP,
  };
}

describe("apps run in the image their [build] base_image names", async () => {
  const ready = await imageToolsWork("image apps") && await sandboxWorks("image apps");
  let t: TestServer;
  let token: string;
  let registry: TestRegistry;
  let reference: string;

  async function request(path: string, init: RequestInit = {}): Promise<Response> {
    return await checkedFetch(`${t.url}${path}`, {
      ...init,
      headers: { Authorization: `Bearer ${token}`, ...init.headers },
    });
  }

  async function deploy(appId: string, files: Record<string, string>): Promise<Response> {
    return await request(`/v3/projects/${TEST_PROJECT}/apps/${appId}/deployments`, {
      method: "POST",
      headers: { "Content-Type": "application/gzip" },
      body: new Uint8Array(await bundleOf(files)),
    });
  }

  async function built(appId: string, id: string): Promise<Deployment> {
    for (const started = Date.now(); Date.now() - started < 300_000;) {
      const response = await request(`/v3/projects/${TEST_PROJECT}/apps/${appId}/deployments/${id}`);
      const deployment = (await response.json()) as Deployment;
      if (deployment.status === "ready" || deployment.status === "failed") return deployment;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    throw new Error(`deployment ${id} did not finish building`);
  }

  async function buildLog(appId: string, id: string): Promise<string> {
    const response = await request(`/v3/projects/${TEST_PROJECT}/apps/${appId}/deployments/${id}/logs`);
    return await response.text();
  }

  before(async () => {
    if (!ready) return;
    const layout = await testBaseImage();
    registry = await startTestRegistry();
    await registry.push(layout, { tag: BASE_IMAGE_TAG, name: IMAGE_NAME });
    reference = `${registry.host}/${IMAGE_NAME}`;
    t = await startTestServer({
      env: { RUNPLANE_IMAGE_REGISTRIES: registry.host, RUNPLANE_INSECURE_REGISTRIES: registry.host },
    });
    token = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
  });

  after(async () => {
    await t?.close();
    await registry?.close();
  });

  it("serves a replica whose system and Python are the image's, with the image's ENV under [env]", {
    skip: !ready,
  }, async () => {
    const response = await deploy("imaged", imageApp(reference));
    assert.equal(response.status, 202, await response.clone().text());
    const { deployment_id } = (await response.json()) as Deployment;
    const deployment = await built("imaged", deployment_id);
    const log = await buildLog("imaged", deployment_id);
    assert.equal(deployment.status, "ready", `${deployment.error}\n${log}`);
    assert.match(log, /==> image: pulling /);
    assert.match(log, /==> image: .* is sha256:[0-9a-f]{64}/);
    // The deployment records the image it runs in: the reference as written, the digest the build pulled.
    assert.equal(deployment.image?.reference, reference);
    assert.match(String(deployment.image?.digest), /^sha256:[0-9a-f]{64}$/);
    const pulled = log.match(/==> image: (\S+) is (sha256:[0-9a-f]{64})/);
    assert.deepEqual(pulled?.slice(1), [reference, deployment.image?.digest], "the digest the build log names");
    const shown = await runMain(["deployments", "get", `${TEST_PROJECT}/imaged`, deployment_id], {
      env: { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: token },
    });
    assert.equal(shown.code, 0, shown.stderr);
    assert.ok(
      shown.stdout.includes(`\nimage: ${reference}\nimage digest: ${deployment.image?.digest}\n`),
      shown.stdout,
    );
    const call = await request(`/v4/${TEST_PROJECT}/imaged/run`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: "{}",
    });
    const body = (await call.json()) as { result: Record<string, unknown> };
    assert.equal(call.status, 200, JSON.stringify(body));
    const seen = body.result;
    assert.equal(seen.codename, "trixie", "the image's /etc/os-release, not the host's bookworm");
    assert.match(String(seen.python), /^3\.13\./, "the image's Python, not the host's 3.11");
    assert.match(String(seen.python3), /^Python 3\.13\./);
    assert.equal(seen.built, "VERSION_CODENAME=trixie", "the shell command ran in the image too");
    assert.equal(seen.image_env, "from the image", "the image's ENV");
    assert.deepEqual(seen.left_out, [], "an image's LD_PRELOAD or RUNPLANE_* never reaches the jail's root processes");
    assert.match(log, /==> image: ENV LD_PRELOAD left out: /);
    assert.match(log, /==> image: ENV RUNPLANE_TEST_IMAGE left out: /);
    assert.equal(seen.app_env, "hello", "[env] on top");
    assert.equal(seen.usr_writable, false, "the image is read-only to its replicas");
    assert.notEqual(seen.uid, 0);
  });

  it("refuses at deploy (400) an image from a registry the operator does not allow, naming it", {
    skip: !ready,
  }, async () => {
    const response = await deploy("elsewhere", imageApp("registry.example.com/team/model:1"));
    const problem = (await response.json()) as Problem;
    assert.equal(response.status, 400, JSON.stringify(problem));
    assert.equal(problem.errors?.[0]?.path, "body.runplane.toml");
    assert.match(problem.detail, /registry\.example\.com\/team\/model:1/);
    assert.match(problem.detail, /RUNPLANE_IMAGE_REGISTRIES/);
  });

  it("fails the build, naming the image, when it cannot be pulled; nothing is served", { skip: !ready }, async () => {
    const response = await deploy("missing", imageApp(`${registry.host}/runplane-test/absent:1`));
    assert.equal(response.status, 202, await response.clone().text());
    const { deployment_id } = (await response.json()) as Deployment;
    const deployment = await built("missing", deployment_id);
    assert.equal(deployment.status, "failed");
    assert.match(deployment.error ?? "", /image failed: .*runplane-test\/absent:1 could not be pulled/);
  });
});
