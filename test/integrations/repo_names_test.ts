import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { assertRepoCoordinates, isPlainRef } from "../../server/integrations/mod.ts";
import { isProblemError } from "../../server/problems/mod.ts";

function fieldsOf(owner: string, repo: string, ref?: string): string[] {
  try {
    assertRepoCoordinates({ owner, repo }, ref);
    return [];
  } catch (error) {
    assert.ok(isProblemError(error) && error.status === 400);
    return (error.options.errors ?? []).map((e) => e.path);
  }
}

describe("repository names", () => {
  it("accepts GitHub's owner and repository names", () => {
    for (
      const [owner, repo] of [["acme", "widgets"], ["a-b-c", "x.y_z-1"], ["A1", "name.git"], [
        "x".repeat(39),
        "r".repeat(100),
      ]]
    ) {
      assert.deepEqual(fieldsOf(owner, repo), [], `${owner}/${repo}`);
    }
  });

  it("refuses anything that could leave the project's folder or change a URL", () => {
    for (const owner of ["..", "../x", "a/b", "-a", "a-", "a--b", "", "x".repeat(40), "a b", "a%2Fb"]) {
      assert.deepEqual(fieldsOf(owner, "ok"), ["path.owner"], owner);
    }
    for (const repo of [".", "..", "a/b", "a\\b", "", "r".repeat(101), "a?b", "a#b"]) {
      assert.deepEqual(fieldsOf("ok", repo), ["path.repo"], repo);
    }
  });

  it("accepts branch, tag and sha refs and refuses expressions and options", () => {
    for (const ref of ["main", "feature/x", "v1.0", "release-2024.01", "0123abc", "a".repeat(40)]) {
      assert.ok(isPlainRef(ref), ref);
    }
    for (
      const ref of [
        "",
        "-x",
        "--output=x",
        "a..b",
        "a~1",
        "a^",
        "HEAD@{1}",
        "a:b",
        "a b",
        "a/",
        "/a",
        "a.lock",
        ".hidden",
        "a//b",
        "a\u0000",
      ]
    ) {
      assert.ok(!isPlainRef(ref), JSON.stringify(ref));
    }
  });
});
