/**
 * `createBaseImageHash`'s `new`/`cached` says what the build will do with the dependency layer: `new`
 * when pip will make the digest's virtualenv, `cached` when a ready one is reused. It used to say whether
 * the project had asked for the digest before, so `runplane deploy` printed "cached" while pip built a
 * new virtualenv (after a failed build, or after asking twice), and "new" for a virtualenv another
 * project had built.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { baseImageRequestFromToml } from "../../client/base_image_request.ts";
import { createTestClient } from "../_helpers/client.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { writeWheel } from "../_helpers/wheels.ts";

const TOML = `[dependencies.pip]\nrp_layer = "1.0"\n`;
const MAIN = `import rp_layer\n\ndef run():\n    return rp_layer.VALUE\n`;

describe("the dependency layer's new/cached says what the build will do", () => {
  let t: TestServer;
  let root: string;
  let deployToken: string;
  let otherProject: ReturnType<typeof createTestClient>;

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-layer-"));
    const wheels = join(root, "wheels");
    await mkdir(wheels);
    writeWheel(wheels, "rp_layer", "1.0");
    t = await startTestServer({ env: { RUNPLANE_PIP_FIND_LINKS: wheels } });
    deployToken = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
    otherProject = createTestClient(t.url, (await t.mintToken({ projectId: "p-other" })).token);
  });
  after(async () => {
    await t?.close();
    await rm(root, { recursive: true, force: true });
  });

  /** The layer's status as `runplane deploy` asks for it: the request made from the app's runplane.toml. */
  async function layer(toml: string, client = t.client, project = TEST_PROJECT): Promise<string | undefined> {
    const { data } = await client.POST("/v3/projects/{project_id}/apps/{app_id}/base-image", {
      params: { path: { project_id: project, app_id: "layered" } },
      body: baseImageRequestFromToml(toml),
    });
    return data?.status;
  }

  it("is new however often it is asked while no build has made the virtualenv", async () => {
    assert.equal(await layer(TOML), "new");
    assert.equal(await layer(TOML), "new");
  });

  it("stays new after a build whose pip step failed", async () => {
    const missing = `[dependencies.pip]\nrp_missing = "9.9"\n`;
    assert.equal(await layer(missing), "new");
    const failed = await deployBundle(
      t,
      "broken",
      await bundleOf({ "runplane.toml": missing, "main.py": MAIN }),
      deployToken,
    );
    assert.equal(failed.status, "failed");
    assert.equal(await layer(missing), "new", "the next build runs pip again");
  });

  it("is cached once a build made the virtualenv, for every project (builds share it)", async () => {
    const built = await deployBundle(
      t,
      "layered",
      await bundleOf({ "runplane.toml": TOML, "main.py": MAIN }),
      deployToken,
    );
    assert.equal(built.status, "ready", built.lines.join("\n"));
    assert.ok(built.lines.some((line) => line.startsWith("==> pip: new virtualenv")), built.lines.join("\n"));
    assert.equal(await layer(TOML), "cached");
    assert.equal(await layer(TOML, otherProject, "p-other"), "cached");
    const again = await deployBundle(
      t,
      "again",
      await bundleOf({ "runplane.toml": TOML, "main.py": MAIN }),
      deployToken,
    );
    assert.ok(again.lines.some((line) => line.startsWith("==> pip: cached virtualenv")), again.lines.join("\n"));
  });

  it("is cached when there is nothing to install (no pip requirements)", async () => {
    assert.equal(await layer(`[dependencies.apt]\ncurl = "*"\n`), "cached");
  });
});
