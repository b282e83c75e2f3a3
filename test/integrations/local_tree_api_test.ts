import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { existsSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { main } from "../../server/cli/mod.ts";
import { createLargeRepo } from "../../scripts/bench/large_repo.ts";
import { runMain } from "../_helpers/cli.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import {
  blobSha,
  createFixtureRepo,
  FIXTURE_FILES,
  FIXTURE_SUBMODULE,
  FIXTURE_SYMLINK,
  type FixtureRepo,
  git,
} from "../_helpers/git_repos.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

function sink(): { stream: Writable; text(): string } {
  let text = "";
  return {
    stream: new Writable({
      write(chunk, _encoding, done) {
        text += String(chunk);
        done();
      },
    }),
    text: () => text,
  };
}

/** The entries git should list at `commit` of `repo`, built from the fixture's contents. */
async function expectedEntries(repo: string, commit: string, files: Record<string, string>) {
  const entries: Array<{ path: string; type: string; mode: string; sha: string; size?: number }> = [];
  const folders = new Set<string>();
  for (const [path, content] of Object.entries(files)) {
    const mode = path === "bin/run.sh" ? "100755" : "100644";
    entries.push({ path, type: "file", mode, sha: blobSha(content), size: Buffer.byteLength(content) });
  }
  entries.push({
    path: FIXTURE_SYMLINK.path,
    type: "symlink",
    mode: "120000",
    sha: blobSha(FIXTURE_SYMLINK.target),
    size: FIXTURE_SYMLINK.target.length,
  });
  entries.push({ path: FIXTURE_SUBMODULE.path, type: "submodule", mode: "160000", sha: FIXTURE_SUBMODULE.commit });
  for (const { path } of [...entries]) {
    for (let i = path.indexOf("/"); i !== -1; i = path.indexOf("/", i + 1)) folders.add(path.slice(0, i));
  }
  for (const folder of folders) {
    entries.push({
      path: folder,
      type: "directory",
      mode: "040000",
      sha: await git(repo, "rev-parse", `${commit}:${folder}`),
    });
  }
  return entries.sort((a, b) => (a.path < b.path ? -1 : 1));
}

for (const engine of await engines()) {
  describe(`getRepositoryTree from local git repositories (${engine})`, () => {
    let t: TestServer;
    let fixture: FixtureRepo;
    const repos = () => join(t.dataDir, "repos", TEST_PROJECT);

    before(async () => {
      t = await startTestServer({ engine });
      fixture = await createFixtureRepo(join(repos(), "acme", "widgets"));
    });
    after(() => t.close());

    function tree(owner: string, repo: string, options: { ref?: string; ifNoneMatch?: string } = {}) {
      return t.client.GET("/v4/projects/{project_id}/integrations/github/repos/{owner}/{repo}/tree", {
        params: {
          path: { project_id: TEST_PROJECT, owner, repo },
          query: options.ref === undefined ? {} : { ref: options.ref },
          header: options.ifNoneMatch === undefined ? {} : { "If-None-Match": options.ifNoneMatch },
        },
      });
    }

    function cacheLogs(repo: string, commit: string) {
      return t.logs.filter((line) => line.msg === "repository tree" && line.repo === repo && line.commit === commit)
        .map((
          line,
        ) => line.cache);
    }

    it("lists every entry of the default branch, folders included, with type, mode, size and sha, sorted by path", async () => {
      const { data, response } = await tree("acme", "widgets");
      assert.equal(response.status, 200);
      assert.equal(data?.ref, "main");
      assert.equal(data?.sha, fixture.main);
      assert.deepEqual(
        data?.entries,
        await expectedEntries(fixture.path, fixture.main, { ...FIXTURE_FILES, "docs/guide.md": "# Guide\n" }),
      );
      assert.equal(response.headers.get("etag"), `"${await git(fixture.path, "rev-parse", "main^{tree}")}"`);
    });

    it("selects a branch, an annotated tag and a commit with ref", async () => {
      const feature = await tree("acme", "widgets", { ref: "feature" });
      assert.equal(feature.data?.sha, fixture.feature);
      assert.deepEqual(
        feature.data?.entries,
        await expectedEntries(fixture.path, fixture.feature, { ...FIXTURE_FILES, "feature.txt": "a feature\n" }),
      );
      const tag = await tree("acme", "widgets", { ref: "v1.0" });
      assert.equal(tag.data?.ref, "v1.0");
      assert.equal(tag.data?.sha, fixture.first);
      assert.deepEqual(tag.data?.entries, await expectedEntries(fixture.path, fixture.first, FIXTURE_FILES));
      const commit = await tree("acme", "widgets", { ref: fixture.first });
      assert.equal(commit.data?.sha, fixture.first);
      assert.deepEqual(commit.data?.entries, tag.data?.entries);
    });

    it("serves a bare mirror made by runplane repo add, under its name without the .git suffix", async () => {
      const out = sink();
      const err = sink();
      const code = await main([
        "repo",
        "add",
        fixture.path,
        "--project",
        TEST_PROJECT,
        "--as",
        "acme/gadgets",
        "--data-dir",
        t.dataDir,
      ], {
        stdout: out.stream,
        stderr: err.stream,
        env: {},
      });
      assert.equal(code, 0, err.text());
      assert.equal(out.text().trim(), join(repos(), "acme", "gadgets.git"));
      assert.equal(await git(out.text().trim(), "rev-parse", "--is-bare-repository"), "true");
      const mirrored = await tree("acme", "gadgets", { ref: "feature" });
      const original = await tree("acme", "widgets", { ref: "feature" });
      assert.equal(mirrored.response.status, 200);
      assert.deepEqual(mirrored.data, { ...original.data, repo: "gadgets" });
      const again = await main([
        "repo",
        "add",
        fixture.path,
        "--project",
        TEST_PROJECT,
        "--as",
        "acme/gadgets",
        "--data-dir",
        t.dataDir,
      ], {
        stdout: out.stream,
        stderr: err.stream,
        env: {},
      });
      assert.equal(again, 1);
      assert.match(err.text(), /already exists/);
    });

    it("repo add with a relative --data-dir mirrors into that data dir, and the tree serves it", async () => {
      // git runs inside the owner's folder: a relative destination used to nest a second data dir there.
      const added = await runMain([
        "repo",
        "add",
        fixture.path,
        "--project",
        TEST_PROJECT,
        "--as",
        "acme/relative",
        "--data-dir",
        basename(t.dataDir),
      ], { cwd: dirname(t.dataDir) });
      assert.equal(added.code, 0, added.stderr);
      assert.equal(added.stdout.trim(), join(repos(), "acme", "relative.git"));
      assert.equal(await git(join(repos(), "acme", "relative.git"), "rev-parse", "--is-bare-repository"), "true");
      assert.equal(
        existsSync(join(repos(), "acme", basename(t.dataDir))),
        false,
        "nothing nested in the owner's folder",
      );
      const mirrored = await tree("acme", "relative");
      assert.equal(mirrored.response.status, 200);
      assert.equal(mirrored.data?.sha, fixture.main);
      const synced = await runMain(
        ["repo", "sync", "acme/relative", "--project", TEST_PROJECT, "--data-dir", basename(t.dataDir)],
        { cwd: dirname(t.dataDir) },
      );
      assert.equal(synced.code, 0, synced.stderr);
      assert.equal(synced.stdout.trim(), join(repos(), "acme", "relative.git"));
    });

    it("repo sync brings a mirror up to date with its source: new commits, branches, deletions and default branch", async () => {
      const source = await mkdtemp(join(tmpdir(), "runplane-sync-source-"));
      /** Runs the CLI in-process; resolves with its exit code, stdout and stderr. */
      async function cli(...args: string[]) {
        const out = sink();
        const err = sink();
        const code = await main(args, {
          stdout: out.stream,
          stderr: err.stream,
          env: { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: t.token, RUNPLANE_DATA_DIR: t.dataDir },
        });
        return { code, stdout: out.text(), stderr: err.text() };
      }
      try {
        await git(source, "init", "--quiet", "--initial-branch=main");
        await writeFile(join(source, "README.md"), "first\n");
        await git(source, "add", "-A");
        await git(source, "commit", "--quiet", "-m", "first");
        await git(source, "branch", "old");
        const first = await git(source, "rev-parse", "HEAD");
        const added = await cli("repo", "add", source, "--project", TEST_PROJECT, "--as", "acme/synced");
        assert.equal(added.code, 0, added.stderr);
        assert.equal((await tree("acme", "synced")).data?.sha, first);

        await writeFile(join(source, "new.txt"), "a new file\n");
        await git(source, "add", "-A");
        await git(source, "commit", "--quiet", "-m", "second");
        await git(source, "branch", "next");
        await git(source, "branch", "-D", "old");
        const second = await git(source, "rev-parse", "HEAD");
        // Until the sync the mirror still serves the snapshot.
        assert.equal((await tree("acme", "synced")).data?.sha, first);

        const synced = await cli("repo", "sync", "acme/synced", "--project", TEST_PROJECT);
        assert.equal(synced.code, 0, synced.stderr);
        assert.equal(synced.stdout.trim(), join(repos(), "acme", "synced.git"));
        assert.match(
          synced.stderr,
          /^Synced acme\/synced in project \S+ from \S+: main, next, old changed \(main at [0-9a-f]{7}\)\n$/,
        );
        const main_ = await tree("acme", "synced");
        assert.equal(main_.data?.ref, "main");
        assert.equal(main_.data?.sha, second);
        assert.deepEqual(main_.data?.entries.map((entry) => entry.path), ["README.md", "new.txt"]);
        assert.equal((await tree("acme", "synced", { ref: "next" })).data?.sha, second);
        assert.equal((await tree("acme", "synced", { ref: "old" })).response.status, 404);
        const printed = await cli("tree", "acme/synced", "--project", TEST_PROJECT);
        assert.equal(printed.code, 0, printed.stderr);
        assert.equal(printed.stdout, `acme/synced @ main (${second.slice(0, 7)})\nREADME.md\nnew.txt\n`);

        const again = await cli("repo", "sync", "acme/synced", "--project", TEST_PROJECT);
        assert.equal(again.code, 0, again.stderr);
        assert.match(again.stderr, /acme\/synced in project \S+ is up to date with \S+ \(main at [0-9a-f]{7}\)/);

        // The source's default branch moves: the mirror follows it.
        await git(source, "checkout", "--quiet", "-b", "trunk");
        await writeFile(join(source, "trunk.txt"), "on trunk\n");
        await git(source, "add", "-A");
        await git(source, "commit", "--quiet", "-m", "trunk");
        const moved = await cli("repo", "sync", "acme/synced", "--project", TEST_PROJECT);
        assert.equal(moved.code, 0, moved.stderr);
        const trunk = await tree("acme", "synced");
        assert.equal(trunk.data?.ref, "trunk");
        assert.equal(trunk.data?.sha, await git(source, "rev-parse", "HEAD"));
      } finally {
        await rm(source, { recursive: true, force: true });
      }
    });

    it("repo sync refuses an unknown repository, a repository placed by hand and a bad name", async () => {
      const run = async (...args: string[]) => {
        const err = sink();
        const code = await main(args, {
          stdout: sink().stream,
          stderr: err.stream,
          env: { RUNPLANE_DATA_DIR: t.dataDir },
        });
        return { code, stderr: err.text() };
      };
      const unknown = await run("repo", "sync", "acme/nowhere", "--project", TEST_PROJECT);
      assert.equal(unknown.code, 1);
      assert.match(unknown.stderr, /No repository acme\/nowhere in project .*: mirror one with runplane repo add/);
      const byHand = await run("repo", "sync", "acme/widgets", "--project", TEST_PROJECT);
      assert.equal(byHand.code, 1);
      assert.match(byHand.stderr, /acme\/widgets at .* is not a mirror made by runplane repo add/);
      const badName = await run("repo", "sync", "acme", "--project", TEST_PROJECT);
      assert.equal(badName.code, 2);
      assert.match(badName.stderr, /repo sync needs <owner>\/<repo>/);
    });

    it("answers 404 naming an empty repository, an unknown repository and an unknown ref", async () => {
      await git(repos(), "init", "--quiet", "--bare", join(repos(), "acme", "empty.git"));
      const empty = await tree("acme", "empty");
      assert.equal(empty.response.status, 404);
      assert.match(empty.error?.detail ?? "", /acme\/empty is empty/);
      const unknown = await tree("acme", "nothing-here");
      assert.equal(unknown.response.status, 404);
      assert.match(unknown.error?.detail ?? "", /No repository acme\/nothing-here/);
      const ref = await tree("acme", "widgets", { ref: "no-such-branch" });
      assert.equal(ref.response.status, 404);
      assert.match(ref.error?.detail ?? "", /no branch, tag or commit "no-such-branch"/);
      await mkdir(join(repos(), "acme", "not-git"), { recursive: true });
      const notGit = await tree("acme", "not-git");
      assert.equal(notGit.response.status, 404);
      assert.match(notGit.error?.detail ?? "", /not a git repository/);
    });

    it("answers 400 for ../x as owner and for refs git would read as an expression or an option", async () => {
      const base = `${t.url}/v4/projects/${TEST_PROJECT}/integrations/github/repos`;
      const headers = { Authorization: `Bearer ${t.token}` };
      const owner = await checkedFetch(`${base}/..%2Fx/widgets/tree`, { headers });
      assert.equal(owner.status, 400);
      const body = (await owner.json()) as { errors?: Array<{ path: string }> };
      assert.deepEqual(body.errors?.map((e) => e.path), ["path.owner"]);
      for (const ref of ["main..feature", "--output=/tmp/x", "main~1", "HEAD@{1}"]) {
        const response = await checkedFetch(`${base}/acme/widgets/tree?ref=${encodeURIComponent(ref)}`, { headers });
        assert.equal(response.status, 400, ref);
        assert.deepEqual(((await response.json()) as { errors?: Array<{ path: string }> }).errors?.map((e) => e.path), [
          "query.ref",
        ]);
      }
    });

    it("answers 304 to If-None-Match with the ETag, reads a commit's tree once, and a new commit changes the ETag", async () => {
      const repo = join(repos(), "acme", "cached");
      const cached = await createFixtureRepo(repo);
      const first = await tree("acme", "cached");
      const second = await tree("acme", "cached");
      assert.equal(second.response.status, 200);
      assert.deepEqual(second.data, first.data);
      assert.deepEqual(cacheLogs("cached", cached.main), ["miss", "hit"]);
      const etag = first.response.headers.get("etag")!;
      for (const ifNoneMatch of [etag, `W/${etag}`, `"0000", ${etag}`]) {
        const notModified = await tree("acme", "cached", { ifNoneMatch });
        assert.equal(notModified.response.status, 304, ifNoneMatch);
        assert.equal(notModified.response.headers.get("etag"), etag);
        assert.equal(await notModified.response.text(), "");
      }
      assert.deepEqual(cacheLogs("cached", cached.main), ["miss", "hit"], "a 304 does not read the tree at all");
      await git(repo, "commit", "--quiet", "--allow-empty", "-m", "same tree");
      const sameTree = await tree("acme", "cached", { ifNoneMatch: etag });
      assert.equal(sameTree.response.status, 304, "the ETag is the tree's sha, unchanged by an empty commit");
      await writeFile(join(repo, "new.txt"), "new\n");
      await git(repo, "add", "new.txt");
      await git(repo, "commit", "--quiet", "-m", "new file");
      const changed = await tree("acme", "cached", { ifNoneMatch: etag });
      assert.equal(changed.response.status, 200);
      assert.notEqual(changed.response.headers.get("etag"), etag);
      assert.ok(changed.data?.entries.some((e) => e.path === "new.txt"));
      const metric = await t.server.context.metrics.registry.getSingleMetric("runplane_repository_tree_cache_total")!
        .get();
      const hits = metric.values.find((v) => v.labels.result === "hit")?.value ?? 0;
      assert.ok(hits >= 1, `the cache counter shows hits: ${JSON.stringify(metric.values)}`);
    });

    it("streams a tree larger than one chunk, complete, sorted and valid against the contract", async () => {
      const large = await createLargeRepo(join(repos(), "acme", "large.git"), { files: 3_000, filesPerFolder: 50 });
      const response = await checkedFetch(
        `${t.url}/v4/projects/${TEST_PROJECT}/integrations/github/repos/acme/large/tree`,
        {
          headers: { Authorization: `Bearer ${t.token}` },
        },
      );
      assert.equal(response.status, 200);
      assert.equal(response.headers.get("content-length"), null, "a large answer is streamed, not sent as one string");
      const body = (await response.json()) as { entries: Array<{ path: string; type: string }> };
      assert.equal(body.entries.length, large.entries);
      assert.equal(body.entries.filter((e) => e.type === "file").length, 3_000);
      const paths = body.entries.map((e) => e.path);
      assert.deepEqual(paths, [...paths].sort());
    });
  });
}
