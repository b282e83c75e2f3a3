/**
 * The build's image step against a real registry on loopback: what it logs, the ENV it lets through, and
 * that a host serving a deployment another host built refuses an image pushed again under the same tag.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cp, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { pullImage } from "../../server/deployments/_image_step.ts";
import { createImageStore, findImageTools, type ImageStore, type ImageTools } from "../../server/images/mod.ts";
import { createLogger } from "../../server/log.ts";
import {
  BASE_IMAGE_TAG,
  imageToolsWork,
  startTestRegistry,
  testBaseImage,
  type TestRegistry,
} from "../_helpers/images.ts";

const execFileAsync = promisify(execFile);
const works = await imageToolsWork("the image step tests (test/deployments/image_step_test.ts)");

describe("the build's image step", { skip: !works }, () => {
  let registry: TestRegistry;
  let dir: string;
  let layout: string;
  let tools: ImageTools;

  function store(name: string): ImageStore {
    return createImageStore(join(dir, name), {
      tools,
      registries: [registry.host],
      insecureRegistries: [registry.host],
      logger: createLogger({ level: "silent" }),
    });
  }

  before(async () => {
    registry = await startTestRegistry();
    tools = await findImageTools();
    dir = await mkdtemp(join(tmpdir(), "runplane-image-step-"));
    // A copy of the base image the test may change (the cached one is every test's).
    layout = join(dir, "layout");
    await cp(await testBaseImage(), layout, { recursive: true });
    await registry.push(layout, { tag: BASE_IMAGE_TAG, name: "team/app:1" });
  });

  after(async () => {
    await registry?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("logs the pull and the unpack, keeps the image's allowed ENV and names each variable left out", async () => {
    const lines: string[] = [];
    const image = await pullImage(`${registry.host}/team/app:1`, {
      images: store("first"),
      log: (line) => lines.push(line.text),
    });
    assert.match(image.digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(image.env.IMAGE_GREETING, "from the image");
    assert.equal(image.env.LD_PRELOAD, undefined);
    assert.equal(image.env.RUNPLANE_TEST_IMAGE, undefined);
    assert.ok(lines.some((line) => line.startsWith(`==> image: ${registry.host}/team/app:1 is ${image.digest}`)));
    assert.ok(lines.some((line) => line.startsWith("==> image: root file system ready")));
    assert.ok(lines.some((line) => line.startsWith("==> image: ENV LD_PRELOAD left out: ")));
  });

  it("refuses the image a tag names now when the deployment was built with another", async () => {
    const reference = `${registry.host}/team/app:1`;
    const built = await pullImage(reference, { images: store("builder"), log: () => undefined });
    // The tag is pushed again with another image (its config changed: a new manifest digest).
    await execFileAsync("umoci", ["config", "--image", `${layout}:${BASE_IMAGE_TAG}`, "--config.env", "PUSHED=again"]);
    await registry.push(layout, { tag: BASE_IMAGE_TAG, name: "team/app:1" });
    await assert.rejects(
      pullImage(reference, { images: store("other-host"), log: () => undefined, expected: built.digest }),
      (error: Error) => {
        assert.match(error.message, /^image failed: .*team\/app:1 is now sha256:[0-9a-f]{64}, not the sha256:/);
        assert.match(error.message, /deploy again/);
        return true;
      },
    );
    const same = await pullImage(reference, { images: store("other-host"), log: () => undefined });
    assert.notEqual(same.digest, built.digest, "the tag names another image now");
  });
});
