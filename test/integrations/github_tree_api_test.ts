import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { main } from "../../server/cli/mod.ts";
import { saveProjectIntegration } from "../../server/integrations/mod.ts";
import { createTestClient } from "../_helpers/client.ts";
import { type FakeGithub, type FakeNode, startFakeGithub } from "../_helpers/fake_github.ts";
import { engines, TEST_MASTER_KEY } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const ROOT: Record<string, FakeNode> = {
  "README.md": { kind: "blob", content: "# Widgets\n" },
  "run.sh": { kind: "blob", mode: "100755", content: "#!/bin/sh\n" },
  latest: { kind: "blob", mode: "120000", content: "src/main.py" },
  src: {
    kind: "tree",
    children: {
      "main.py": { kind: "blob", content: "print(1)\n" },
      lib: {
        kind: "tree",
        children: {
          "a.py": { kind: "blob", content: "a\n" },
          "b.py": { kind: "blob", content: "bb\n" },
          "c.py": { kind: "blob", content: "ccc\n" },
        },
      },
      "z.py": { kind: "blob", content: "z\n" },
    },
  },
  "src-notes.txt": { kind: "blob", content: "notes\n" },
  vendor: { kind: "tree", children: { dep: { kind: "commit", sha: "1234567890abcdef1234567890abcdef12345678" } } },
};
const FEATURE: Record<string, FakeNode> = { ...ROOT, "feature.txt": { kind: "blob", content: "feature\n" } };

for (const engine of await engines()) {
  describe(`getRepositoryTree from GitHub's REST API (${engine})`, () => {
    let t: TestServer;
    let github: FakeGithub;
    const token = `ghp_${randomBytes(18).toString("hex")}`;

    before(async () => {
      github = await startFakeGithub({
        "acme/widgets": { defaultBranch: "main", refs: { main: ROOT, "feature/x": FEATURE, "v1.0": ROOT } },
        "acme/big": { defaultBranch: "trunk", refs: { trunk: ROOT }, truncate: ["", "src"] },
        "acme/empty": { defaultBranch: "main", refs: {} },
        "acme/limited": { defaultBranch: "main", refs: { main: ROOT }, failure: "rate-limit" },
        "acme/throttled": { defaultBranch: "main", refs: { main: ROOT }, failure: "secondary-rate-limit" },
        "acme/broken": { defaultBranch: "main", refs: { main: ROOT }, failure: "server-error" },
      });
      t = await startTestServer({ engine });
      let stderr = "";
      const code = await main([
        "integration",
        "github",
        "--project",
        TEST_PROJECT,
        "--token",
        token,
        "--github-api-url",
        github.apiUrl,
        "--data-dir",
        t.dataDir,
        ...(t.databaseUrl ? ["--database-url", t.databaseUrl] : []),
      ], {
        stdout: new Writable({ write: (_c, _e, done) => done() }),
        stderr: new Writable({ write: (chunk, _e, done) => ((stderr += chunk), done()) }),
        env: t.databaseUrl ? { RUNPLANE_MASTER_KEY: TEST_MASTER_KEY } : {},
      });
      assert.equal(code, 0, stderr);
      assert.ok(!stderr.includes(token));
    });
    after(async () => {
      await t.close();
      await github.close();
    });

    function tree(
      repo: string,
      options: { ref?: string; ifNoneMatch?: string; client?: typeof t.client; project?: string } = {},
    ) {
      return (options.client ?? t.client).GET(
        "/v4/projects/{project_id}/integrations/github/repos/{owner}/{repo}/tree",
        {
          params: {
            path: { project_id: options.project ?? TEST_PROJECT, owner: "acme", repo },
            query: options.ref === undefined ? {} : { ref: options.ref },
            header: options.ifNoneMatch === undefined ? {} : { "If-None-Match": options.ifNoneMatch },
          },
        },
      );
    }
    const requestsSince = (start: number) => github.requests.slice(start).map((r) => r.path);

    it("looks up the default branch, fetches the recursive tree, and sends the token as a bearer token", async () => {
      const start = github.requests.length;
      const { data, response } = await tree("widgets");
      assert.equal(response.status, 200);
      assert.equal(data?.ref, "main");
      assert.equal(data?.sha, github.commitOf("acme/widgets", "main"));
      assert.equal(response.headers.get("etag"), `"${github.treeOf("acme/widgets", "main")}"`);
      assert.deepEqual(data?.entries, github.expectedEntries("acme/widgets", "main"));
      assert.deepEqual(data?.entries.find((e) => e.path === "run.sh"), {
        path: "run.sh",
        type: "file",
        mode: "100755",
        sha: data?.entries.find((e) => e.path === "run.sh")?.sha,
        size: 10,
      });
      assert.equal(data?.entries.find((e) => e.path === "latest")?.type, "symlink");
      assert.deepEqual(data?.entries.find((e) => e.path === "vendor/dep"), {
        path: "vendor/dep",
        type: "submodule",
        mode: "160000",
        sha: "1234567890abcdef1234567890abcdef12345678",
      });
      assert.equal(data?.entries.find((e) => e.path === "src/lib")?.type, "directory");
      assert.deepEqual(requestsSince(start), [
        "/api/v3/repos/acme/widgets",
        "/api/v3/repos/acme/widgets/commits/main",
        `/api/v3/repos/acme/widgets/git/trees/${github.treeOf("acme/widgets", "main")}?recursive=1`,
      ]);
      for (const request of github.requests.slice(start)) {
        assert.equal(request.headers.authorization, `Bearer ${token}`);
        assert.equal(request.headers.accept, "application/vnd.github+json");
        assert.ok(request.headers["user-agent"]);
      }
    });

    it("resolves a branch with a slash and a tag through the commits endpoint", async () => {
      const feature = await tree("widgets", { ref: "feature/x" });
      assert.equal(feature.data?.sha, github.commitOf("acme/widgets", "feature/x"));
      assert.deepEqual(feature.data?.entries, github.expectedEntries("acme/widgets", "feature/x"));
      assert.ok(feature.data?.entries.some((e) => e.path === "feature.txt"));
      const tag = await tree("widgets", { ref: "v1.0" });
      assert.equal(tag.data?.ref, "v1.0");
      assert.equal(tag.data?.sha, github.commitOf("acme/widgets", "v1.0"));
    });

    it("walks the subtrees of a truncated answer so the tree is complete", async () => {
      const start = github.requests.length;
      const { data, response } = await tree("big");
      assert.equal(response.status, 200);
      assert.equal(data?.ref, "trunk");
      assert.deepEqual(data?.entries, github.expectedEntries("acme/big", "trunk"));
      const paths = requestsSince(start);
      assert.ok(
        paths.includes(`/api/v3/repos/acme/big/git/trees/${github.treeOf("acme/big", "trunk")}`),
        `listed the root alone: ${paths.join(" ")}`,
      );
      assert.ok(paths.filter((p) => p.includes("/git/trees/")).length >= 5, `walked the subtrees: ${paths.join(" ")}`);
    });

    it("does not call GitHub for the tree again for a cached commit, and answers 304 to its ETag", async () => {
      const first = await tree("widgets", { ref: "main" });
      const start = github.requests.length;
      const second = await tree("widgets", { ref: "main" });
      assert.deepEqual(second.data, first.data);
      assert.deepEqual(requestsSince(start), ["/api/v3/repos/acme/widgets/commits/main"]);
      const notModified = await tree("widgets", { ref: "main", ifNoneMatch: first.response.headers.get("etag")! });
      assert.equal(notModified.response.status, 304);
      assert.equal(notModified.response.headers.get("etag"), first.response.headers.get("etag"));
    });

    it("answers 404 for GitHub's unknown repository, unknown ref and empty repository", async () => {
      const repo = await tree("nothing");
      assert.equal(repo.response.status, 404);
      assert.match(repo.error?.detail ?? "", /GitHub has no repository acme\/nothing/);
      const ref = await tree("widgets", { ref: "no-such-ref" });
      assert.equal(ref.response.status, 404);
      assert.match(ref.error?.detail ?? "", /no branch, tag or commit "no-such-ref"/);
      const empty = await tree("empty");
      assert.equal(empty.response.status, 404);
      assert.match(empty.error?.detail ?? "", /acme\/empty is empty/);
    });

    it("answers 503 with Retry-After when GitHub's rate limit is exhausted (403 with x-ratelimit-reset, 429 with retry-after)", async () => {
      const limited = await tree("limited");
      assert.equal(limited.response.status, 503);
      const seconds = Number(limited.response.headers.get("retry-after"));
      assert.ok(seconds >= 60 && seconds <= 121, `Retry-After from x-ratelimit-reset: ${seconds}`);
      assert.match(limited.error?.detail ?? "", /rate limit/);
      const throttled = await tree("throttled");
      assert.equal(throttled.response.status, 503);
      assert.equal(throttled.response.headers.get("retry-after"), "30");
    });

    it("answers 502 for GitHub's 500 and for a GitHub that cannot be reached", async () => {
      const broken = await tree("broken");
      assert.equal(broken.response.status, 502);
      assert.match(broken.error?.detail ?? "", /answered 500/);
      const { token: downToken } = await t.mintToken({ projectId: "p-down" });
      const closed = await startFakeGithub({});
      await closed.close();
      await saveProjectIntegration(
        { db: t.server.context.store.db, secrets: t.server.context.secrets },
        { projectId: "p-down", integration: { provider: "github", apiUrl: closed.apiUrl, token } },
      );
      const down = await tree("widgets", { project: "p-down", client: createTestClient(t.url, downToken) });
      assert.equal(down.response.status, 502);
      assert.match(down.error?.detail ?? "", /Could not reach GitHub/);
    });

    it("keeps the token encrypted at rest and out of every log line", async () => {
      const row = await t.server.context.store.db.selectFrom("project_integrations").selectAll().where(
        "project_id",
        "=",
        TEST_PROJECT,
      ).executeTakeFirstOrThrow();
      assert.equal(row.provider, "github");
      assert.ok(row.github_token_sealed && !row.github_token_sealed.includes(token));
      assert.equal(t.server.context.secrets.open(row.github_token_sealed), token);
      assert.ok(t.logs.length > 10);
      assert.ok(!t.rawLogs().includes(token), "the token never reaches the log");
      assert.ok(!t.rawLogs().includes(token.slice(4)), "not even without its prefix");
    });
  });
}
