import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { formatTree } from "../../client/tree_format.ts";

const SHA = "0123456789abcdef0123456789abcdef01234567";

describe("formatTree", () => {
  it("indents each entry by depth and marks directories, symlinks and submodules", () => {
    const text = formatTree({
      owner: "octo",
      repo: "hello",
      ref: "main",
      sha: SHA,
      entries: [
        { path: "README.md", type: "file", mode: "100644", sha: SHA, size: 12 },
        { path: "src", type: "directory", mode: "040000", sha: SHA },
        { path: "src/lib", type: "directory", mode: "040000", sha: SHA },
        { path: "src/lib/util.py", type: "file", mode: "100644", sha: SHA, size: 3 },
        { path: "src/main.py", type: "file", mode: "100755", sha: SHA, size: 40 },
        { path: "latest", type: "symlink", mode: "120000", sha: SHA, size: 3 },
        { path: "vendor", type: "submodule", mode: "160000", sha: "fedcba9876543210fedcba9876543210fedcba98" },
      ],
    });
    assert.equal(
      text,
      [
        "octo/hello @ main (0123456)",
        "README.md",
        "src/",
        "  lib/",
        "    util.py",
        "  main.py",
        "latest@",
        "vendor -> fedcba9",
      ].join("\n"),
    );
  });
});
