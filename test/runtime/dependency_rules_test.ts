import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  aptEntryProblem,
  condaEntryProblem,
  isPipVersion,
  pipEntryProblem,
} from "../../server/runtime/_dependency_rules.ts";

describe("dependency entry rules", () => {
  it("accepts PEP 440 versions and specifiers", () => {
    for (
      const version of [
        "*",
        "",
        "1",
        "1.2",
        "1.2.*",
        "2024.1.0",
        "1!2.0",
        "1.0a1",
        "1.0rc2.post3.dev4",
        "1.0+cpu.2",
        "v1.0",
        ">=1,<2",
        ">= 1 , < 2",
        "~=1.4",
        "==1.2.*",
        "!=1.3.*",
        "===1.0-custom",
        "<3",
        ">0.1",
      ]
    ) {
      assert.ok(isPipVersion(version), version);
    }
  });

  it("refuses what is not a version specifier", () => {
    for (
      const version of [
        "@ https://example.com/x.whl",
        "latest",
        ">=1.*",
        "~=1.*",
        "1.2,<2",
        ">=1,",
        ">=1 <2",
        ">=1; python_version>'3'",
        "-1",
        "==1 --hash=sha256:00",
        "=== -x",
        "1.0+",
        "../x",
      ]
    ) {
      assert.ok(!isPipVersion(version), version);
    }
  });

  it("refuses pip names that are not PEP 508 names, and line breaks whatever the operator allows", () => {
    for (const name of ["requests", "A", "zope.interface", "typing_extensions", "uvicorn[standard]", "a[b, c]"]) {
      assert.equal(pipEntryProblem(name, "*"), null, name);
    }
    for (const name of ["-r", "--pre", ".", "a.", "_a", "a b", "a[", "a[-x]", "https://x/y.whl", "a@b"]) {
      assert.match(pipEntryProblem(name, "*") ?? "", /is not a package name/, name);
    }
    assert.equal(pipEntryProblem("--pre", "*", { allowUnpinned: true }), null);
    assert.match(pipEntryProblem("a\nb", "*", { allowUnpinned: true }) ?? "", /line break/);
    assert.match(pipEntryProblem("a", "1\r", { allowUnpinned: true }) ?? "", /line break/);
  });

  it("holds apt and conda to their package-name and version alphabets", () => {
    assert.equal(aptEntryProblem("libstdc++6", "12.2.0-14"), null);
    assert.equal(aptEntryProblem("git", "1:2.39.5-0+deb12u1~bpo1"), null);
    assert.match(aptEntryProblem("a", "*") ?? "", /Debian package name/);
    assert.match(aptEntryProblem("-f", "*") ?? "", /Debian package name/);
    assert.match(aptEntryProblem("curl", "-1") ?? "", /Debian version/);
    assert.match(aptEntryProblem("curl", "1 2") ?? "", /Debian version/);
    assert.equal(condaEntryProblem("_openmp_mutex", "4.5=2_gnu"), null);
    assert.equal(condaEntryProblem("numpy", ">=1.26,<2.0"), null);
    assert.match(condaEntryProblem("-c", "*") ?? "", /conda package name/);
    assert.match(condaEntryProblem("numpy", "1.26 && id") ?? "", /conda version spec/);
  });
});
