/** Finding the image tools on a host, and the refusal that names what is missing. */
import assert from "node:assert/strict";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { findImageTools, missingToolsMessage } from "../../server/images/mod.ts";

describe("findImageTools", () => {
  const made: string[] = [];
  after(async () => {
    for (const dir of made) await rm(dir, { recursive: true, force: true });
  });

  async function folderWith(names: string[], mode = 0o755): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "runplane-image-tools-"));
    made.push(dir);
    for (const name of names) {
      await writeFile(join(dir, name), "#!/bin/sh\n");
      await chmod(join(dir, name), mode);
    }
    return dir;
  }

  it("finds tools on PATH before /usr/bin", async () => {
    const dir = await folderWith(["skopeo", "umoci", "buildah", "mmdebstrap"]);
    const tools = await findImageTools({ path: `relative/bin:${dir}` });
    assert.equal(tools.paths.skopeo, join(dir, "skopeo"));
    assert.equal(tools.paths.mmdebstrap, join(dir, "mmdebstrap"));
    assert.deepEqual(tools.missing, []);
    assert.equal(missingToolsMessage(tools), null);
  });

  it("does not take a file that is not executable", async () => {
    const dir = await folderWith(["skopeo"], 0o644);
    const tools = await findImageTools({ path: dir });
    assert.notEqual(tools.paths.skopeo, join(dir, "skopeo"));
  });

  it("names the missing required tools in the refusal", () => {
    const message = missingToolsMessage({
      paths: { skopeo: null, umoci: null, buildah: "/usr/bin/buildah", mmdebstrap: null },
      missing: ["skopeo", "umoci"],
    });
    assert.match(message!, /cannot run apps with a base_image: skopeo and umoci are not installed/);
    assert.match(message!, /apt-get install skopeo umoci/);
    const one = missingToolsMessage({
      paths: { skopeo: "/usr/bin/skopeo", umoci: null, buildah: null, mmdebstrap: null },
      missing: ["umoci"],
    });
    assert.match(one!, /umoci is not installed/);
  });

  it("finds what this host has in /usr/bin even with an empty PATH", async () => {
    const tools = await findImageTools({ path: "" });
    for (const name of ["skopeo", "umoci", "buildah", "mmdebstrap"] as const) {
      assert.ok(tools.paths[name] === null || tools.paths[name]!.startsWith("/usr/"), name);
    }
  });
});
