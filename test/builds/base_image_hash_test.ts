import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { baseImageDigest, canonicalBaseImage, normalizePipRequirement } from "../../server/builds/mod.ts";
import { ProblemError } from "../../server/problems/mod.ts";

const b64 = (text: string) => Buffer.from(text).toString("base64");

describe("base-image canonical form", () => {
  it("normalises pip names as PEP 503 does, keeping specifiers and markers", () => {
    assert.equal(normalizePipRequirement("Foo_Bar==1.0"), "foo-bar==1.0");
    assert.equal(normalizePipRequirement("foo.bar >= 1.0, < 2"), "foo-bar>=1.0,<2");
    assert.equal(
      normalizePipRequirement("Requests[Security,SOCKS] ==2.0 ; python_version  < '3.12'"),
      "requests[security,socks]==2.0; python_version < '3.12'",
    );
  });

  it("defaults the base image and decodes commands in order", () => {
    const canonical = canonicalBaseImage({ shellCommands: [b64("apt-get update"), b64("make")] });
    assert.equal(canonical.baseImageUri, "debian:bookworm-slim");
    assert.deepEqual(canonical.shellCommands, ["apt-get update", "make"]);
  });

  it("gives an absent member and an empty list the same digest", () => {
    assert.equal(baseImageDigest({}), baseImageDigest({ aptPackages: [], baseImageUri: "debian:bookworm-slim" }));
  });

  it("names every bad command in one problem", () => {
    assert.throws(
      () => canonicalBaseImage({ preBuildCommands: ["@@"], shellCommands: [b64("ok"), "abc"] }),
      (error) => {
        assert.ok(error instanceof ProblemError);
        assert.equal(error.status, 400);
        assert.deepEqual(error.options.errors?.map((e) => e.path), [
          "body.preBuildCommands[0]",
          "body.shellCommands[1]",
        ]);
        return true;
      },
    );
  });

  it("changes the digest when a package version changes", () => {
    assert.notEqual(
      baseImageDigest({ pipRequirements: ["numpy==2.0"] }),
      baseImageDigest({ pipRequirements: ["numpy==2.1"] }),
    );
  });
});
