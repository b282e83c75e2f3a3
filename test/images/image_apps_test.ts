/**
 * Apps with `[build] base_image`, end to end on a real server: the image pulled from a registry of the
 * test's own on loopback (Debian's docker-registry, holding a Debian trixie image with Python 3.13 made by
 * mmdebstrap), its root the `/` of every build step and replica, in the same jail as any app. The host is
 * Debian bookworm with Python 3.11, so what a replica reports tells the image's system from the host's.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { runMain } from "../_helpers/cli.ts";
import { type ImageAppsServer, startImageAppsServer } from "../_helpers/image_apps.ts";
import { imageToolsWork } from "../_helpers/images.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { TEST_PROJECT } from "../_helpers/server.ts";

type Problem = { status: number; detail: string; errors?: Array<{ path: string; message: string }> };

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
  let apps: ImageAppsServer;

  before(async () => {
    if (ready) apps = await startImageAppsServer();
  });

  after(async () => {
    await apps?.close();
  });

  it("serves a replica whose system and Python are the image's, with the image's ENV under [env]", {
    skip: !ready,
  }, async () => {
    const { deployment, log } = await apps.deployed("imaged", imageApp(apps.reference));
    const reference = apps.reference;
    assert.equal(deployment.status, "ready", `${deployment.error}\n${log}`);
    assert.match(log, /==> image: pulling /);
    assert.match(log, /==> image: .* is sha256:[0-9a-f]{64}/);
    // The deployment records the image it runs in: the reference as written, the digest the build pulled.
    assert.equal(deployment.image?.reference, reference);
    assert.match(String(deployment.image?.digest), /^sha256:[0-9a-f]{64}$/);
    const pulled = log.match(/==> image: (\S+) is (sha256:[0-9a-f]{64})/);
    assert.deepEqual(pulled?.slice(1), [reference, deployment.image?.digest], "the digest the build log names");
    const shown = await runMain(["deployments", "get", `${TEST_PROJECT}/imaged`, deployment.deployment_id], {
      env: { RUNPLANE_BASE_URL: apps.server.url, RUNPLANE_TOKEN: apps.token },
    });
    assert.equal(shown.code, 0, shown.stderr);
    assert.ok(
      shown.stdout.includes(`\nimage: ${reference}\nimage digest: ${deployment.image?.digest}\n`),
      shown.stdout,
    );
    const call = await apps.call("imaged");
    assert.equal(call.status, 200, JSON.stringify(call.body));
    const seen = call.body.result!;
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
    const response = await apps.deploy("elsewhere", imageApp("registry.example.com/team/model:1"));
    const problem = (await response.json()) as Problem;
    assert.equal(response.status, 400, JSON.stringify(problem));
    assert.equal(problem.errors?.[0]?.path, "body.runplane.toml");
    assert.match(problem.detail, /registry\.example\.com\/team\/model:1/);
    assert.match(problem.detail, /RUNPLANE_IMAGE_REGISTRIES/);
  });

  it("fails the build, naming the image, when it cannot be pulled; nothing is served", { skip: !ready }, async () => {
    const { deployment } = await apps.deployed("missing", imageApp(`${apps.registry.host}/runplane-test/absent:1`));
    assert.equal(deployment.status, "failed");
    assert.match(deployment.error ?? "", /image failed: .*runplane-test\/absent:1 could not be pulled/);
  });
});
