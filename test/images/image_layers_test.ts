/**
 * The layers of an app's image: `[dependencies.apt]` installed by the image's own apt into a system layer,
 * `[dependencies.pip]` into a virtualenv made with the image's Python, each reused while its inputs are the
 * same — so a change of pip lines alone rebuilds only the virtualenv, and a redeploy with no dependency
 * change builds nothing. Real registry on loopback, real apt against Debian's archive, real pip from a folder
 * of wheels.
 */
import assert from "node:assert/strict";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { debianReachable, hostHas, type ImageAppsServer, startImageAppsServer } from "../_helpers/image_apps.ts";
import { imageToolsWork } from "../_helpers/images.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { TEST_PROJECT } from "../_helpers/server.ts";
import { writeWheel } from "../_helpers/wheels.ts";
import { baseImageRequestFromToml } from "../../client/base_image_request.ts";

/**
 * An app on the image with figlet (which the host lacks) and python3-venv from apt, and `rp_layerdep` at
 * `pip` from pip; its function runs figlet and reports its Python.
 */
function layeredApp(reference: string, options: { pip: string; code: string }): Record<string, string> {
  return {
    "runplane.toml": `[deployment]\nname = "layered"\n[build]\nbase_image = "${reference}"\n`
      + `[dependencies.apt]\nfiglet = "*"\npython3-venv = "*"\n[dependencies.pip]\nrp_layerdep = "${options.pip}"\n`,
    "main.py": `import platform, shutil, subprocess, sys\nimport rp_layerdep\n\nCODE = "${options.code}"\n\n`
      + `def run():\n`
      + `    figlet = subprocess.run(["figlet", "-f", "term", "hi"], capture_output=True, text=True).stdout.strip()\n`
      + `    return {"dep": rp_layerdep.VALUE, "python": platform.python_version(), "prefix": sys.prefix,\n`
      + `            "code": CODE, "figlet": shutil.which("figlet"), "said": figlet}\n`,
  };
}

/** The build log's lines of the apt and pip steps: what each built or reused, and how long it took. */
function stepLines(log: string): string[] {
  return log.split("\n").filter((line) => /^==> (apt|pip):/.test(line));
}

describe("an image's layers are cached by their inputs", async () => {
  const ready = await imageToolsWork("image layers") && await sandboxWorks("image layers");
  const online = ready && await debianReachable();
  if (ready && !online) console.error("\n*** SKIPPED image layers: deb.debian.org is unreachable from here.\n");
  let apps: ImageAppsServer;
  let wheels: string;

  before(async () => {
    if (!online) return;
    wheels = await mkdtemp(join(tmpdir(), "runplane-layer-wheels-"));
    await chmod(wheels, 0o755); // the operator's wheels: readable by the builders' uids
    writeWheel(wheels, "rp_layerdep", "1.0");
    writeWheel(wheels, "rp_layerdep", "2.0");
    apps = await startImageAppsServer({ env: { RUNPLANE_PIP_FIND_LINKS: wheels } });
  });

  /** What createBaseImageHash answers for the app's runplane.toml, as `runplane deploy` asks it. */
  async function baseImageStatus(files: Record<string, string>): Promise<string> {
    const response = await apps.request(`/v3/projects/${TEST_PROJECT}/apps/layered/base-image`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(baseImageRequestFromToml(files["runplane.toml"]!)),
    });
    const body = (await response.json()) as { status: string };
    assert.equal(response.status, 200, JSON.stringify(body));
    return body.status;
  }

  after(async () => {
    await apps?.close();
    if (wheels) await rm(wheels, { recursive: true, force: true });
  });

  it("installs apt packages the host lacks, rebuilds only the virtualenv for a pip change, nothing for a code change", {
    skip: !online,
  }, async () => {
    assert.equal(await hostHas("figlet"), false, "the host lacks figlet: only the image's system layer can have it");
    const steps: string[][] = [];
    const cases = [{ pip: "1.0", code: "a" }, { pip: "2.0", code: "a" }, { pip: "2.0", code: "b" }];
    assert.equal(await baseImageStatus(layeredApp(apps.reference, cases[0]!)), "new", "nothing of it is here yet");
    for (const version of cases) {
      const files = layeredApp(apps.reference, version);
      const { deployment, log } = await apps.deployed("layered", files);
      assert.equal(await baseImageStatus(files), "cached", "createBaseImageHash: every layer is here now");
      assert.equal(deployment.status, "ready", `${deployment.error}\n${log}`);
      steps.push(stepLines(log));
      const { status, body } = await apps.call("layered");
      assert.equal(status, 200, JSON.stringify(body));
      assert.equal(body.result?.dep, version.pip);
      assert.equal(body.result?.code, version.code);
      assert.match(String(body.result?.python), /^3\.13\./, "the virtualenv is made with the image's Python");
      assert.notEqual(body.result?.prefix, "/usr", "it runs in the virtualenv");
      assert.equal(body.result?.figlet, "/usr/bin/figlet");
      assert.equal(body.result?.said, "hi");
    }
    const [first, pipChange, codeChange] = steps;
    assert.ok(first!.some((line) => /^==> apt: (new|cached) system layer/.test(line)), first!.join("\n"));
    assert.ok(first!.some((line) => /^==> pip: (new|cached) virtualenv/.test(line)), first!.join("\n"));
    // A pip change: the system layer is reused, the virtualenv built.
    assert.ok(pipChange!.some((line) => /^==> apt: cached system layer/.test(line)), pipChange!.join("\n"));
    assert.ok(pipChange!.some((line) => /^==> pip: new virtualenv/.test(line)), pipChange!.join("\n"));
    assert.ok(!pipChange!.some((line) => /^==> apt: (new|built)/.test(line)), pipChange!.join("\n"));
    // No dependency change: nothing is built.
    assert.ok(codeChange!.every((line) => / cached /.test(line)), codeChange!.join("\n"));
  });
});
