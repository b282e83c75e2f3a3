/**
 * `[dependencies.conda]` of an app with a base image: installed by the image's own micromamba, mamba or
 * conda into its system layer, with the image's ENV (its PATH, MAMBA_ROOT_PREFIX). conda's channels are out
 * of this machine's reach, so the image's micromamba here is a test double that records how it was run (as
 * the GPU tests use a fake inventory); an image with no conda at all fails the build saying so.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, cp, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { type ImageAppsServer, startImageAppsServer } from "../_helpers/image_apps.ts";
import { BASE_IMAGE_TAG, imageToolsWork, testBaseImage } from "../_helpers/images.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";

const execFileAsync = promisify(execFile);

/** micromamba's stand-in: `install` writes its arguments where the app reads them; anything else is a no-op. */
const MICROMAMBA_DOUBLE = `#!/bin/sh
set -e
case "$1" in
  install) mkdir -p "$MAMBA_ROOT_PREFIX/conda-meta"; echo "$@" > "$MAMBA_ROOT_PREFIX/installed.txt" ;;
esac
`;

function condaApp(reference: string): Record<string, string> {
  return {
    "runplane.toml": `[deployment]\nname = "conda"\n[build]\nbase_image = "${reference}"\n`
      + `[dependencies.conda]\nnumpy = "1.26"\nscipy = "*"\n`,
    "main.py":
      `def run():\n    with open("/opt/conda/installed.txt") as f:\n        return {"installed": f.read().strip()}\n`,
  };
}

describe("[dependencies.conda] in an image", async () => {
  const ready = await imageToolsWork("conda in images") && await sandboxWorks("conda in images");
  let apps: ImageAppsServer;
  let dir: string;
  let withConda: string;

  before(async () => {
    if (!ready) return;
    apps = await startImageAppsServer();
    // The test image with a micromamba on its PATH and the ENV a micromamba image sets.
    dir = await mkdtemp(join(tmpdir(), "runplane-conda-image-"));
    const layout = join(dir, "oci");
    await cp(await testBaseImage(), layout, { recursive: true });
    const double = join(dir, "micromamba");
    await writeFile(double, MICROMAMBA_DOUBLE);
    await chmod(double, 0o755);
    const image = `${layout}:${BASE_IMAGE_TAG}`;
    await execFileAsync("umoci", ["insert", "--image", image, double, "/usr/local/bin/micromamba"]);
    await execFileAsync("umoci", ["config", "--image", image, "--config.env", "MAMBA_ROOT_PREFIX=/opt/conda"]);
    await apps.registry.push(layout, { tag: BASE_IMAGE_TAG, name: "runplane-test/micromamba:1" });
    withConda = `${apps.registry.host}/runplane-test/micromamba:1`;
  });

  after(async () => {
    await apps?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it(
    "installs them with the image's micromamba, with the image's ENV, into its system layer",
    { skip: !ready },
    async () => {
      const { deployment, log } = await apps.deployed("conda", condaApp(withConda));
      assert.equal(deployment.status, "ready", `${deployment.error}\n${log}`);
      assert.match(log, /==> conda: new system layer sha256:[0-9a-f]{64}: numpy=1\.26 scipy/);
      const call = await apps.call("conda");
      assert.equal(call.status, 200, JSON.stringify(call.body));
      assert.equal(call.body.result?.installed, "install -y -n base numpy=1.26 scipy");
      const again = await apps.deployed("conda", condaApp(withConda));
      assert.match(again.log, /==> conda: cached system layer/);
    },
  );

  it("fails the build of an image without conda, saying what it needs", { skip: !ready }, async () => {
    const { deployment } = await apps.deployed("noconda", condaApp(apps.reference));
    assert.equal(deployment.status, "failed");
    assert.match(deployment.error ?? "", /^conda failed: `conda install numpy=1\.26 scipy` exited with code 3/);
    assert.match(deployment.error ?? "", /this image has no micromamba, mamba or conda on its PATH/);
  });
});
