import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { after, before, describe, it } from "node:test";
import { createGunzip } from "node:zlib";
import { extract } from "tar-stream";
import { createGithubProvider, createLocalGitProvider } from "../../server/integrations/mod.ts";
import type { TreeProvider } from "../../server/integrations/mod.ts";
import { ProblemError } from "../../server/problems/mod.ts";
import { startFakeGithub, type FakeGithub } from "../_helpers/fake_github.ts";
import { createFixtureRepo, FIXTURE_FILES, type FixtureRepo } from "../_helpers/git_repos.ts";

/** Every entry of a gzip tarball: path → content (folders end in `/`, with no content). */
async function entriesOf(bytes: Uint8Array): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const reader = extract();
  reader.on("entry", (header, stream, next) => {
    const chunks: Buffer[] = [];
    stream.on("data", (chunk) => chunks.push(chunk as Buffer));
    stream.on("end", () => {
      const name = header.name.replace(/^\.\//, "");
      if (name && name !== ".") {
        out[
          header.type === "directory"
            ? name.replace(/\/?$/, "/")
            : `${name}${header.type === "file" ? "" : `@${header.type}`}`
        ] = Buffer.concat(chunks).toString("utf8");
      }
      next();
    });
  });
  await pipeline(Readable.from([bytes]), createGunzip(), reader);
  return out;
}

function files(entries: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(entries).filter(([name]) => !name.endsWith("/")));
}

async function problemOf(promise: Promise<unknown>): Promise<ProblemError> {
  const error = await promise.then(() => null, (e: unknown) => e);
  assert.ok(error instanceof ProblemError, `expected a problem, got ${error}`);
  return error;
}

/** The same checks for both providers: a folder at the root, the root itself, a missing folder, the limit. */
function archiveCases(
  setup: () => { provider: TreeProvider; commit: () => Promise<{ ref: string; commit: string; tree: string }> },
) {
  it("packs a folder with the folder at the archive's root", async () => {
    const { provider, commit } = setup();
    const bytes = await provider.archive({ owner: "acme", repo: "widgets" }, await commit(), {
      path: "src",
      maxBytes: 1024 * 1024,
    });
    assert.deepEqual(files(await entriesOf(bytes)), {
      "main.py": FIXTURE_FILES["src/main.py"],
      "lib/util.py": FIXTURE_FILES["src/lib/util.py"],
      "lib/deep/nested/leaf.txt": FIXTURE_FILES["src/lib/deep/nested/leaf.txt"],
    });
  });

  it("packs the whole repository for an empty path", async () => {
    const { provider, commit } = setup();
    const got = files(
      await entriesOf(
        await provider.archive({ owner: "acme", repo: "widgets" }, await commit(), { path: "", maxBytes: 1 << 20 }),
      ),
    );
    for (const [path, content] of Object.entries(FIXTURE_FILES)) assert.equal(got[path], content, path);
  });

  it("answers 404 for a path that is no folder, and 413 past the limit", async () => {
    const { provider, commit } = setup();
    const resolved = await commit();
    const missing = await problemOf(
      provider.archive({ owner: "acme", repo: "widgets" }, resolved, { path: "nope", maxBytes: 1 << 20 }),
    );
    assert.equal(missing.status, 404);
    assert.match(missing.message, /nope/);
    const large = await problemOf(
      provider.archive({ owner: "acme", repo: "widgets" }, resolved, { path: "", maxBytes: 64 }),
    );
    assert.equal(large.status, 413);
  });
}

describe("repository archives from a local mirror", () => {
  let root: string;
  let fixture: FixtureRepo;
  let provider: TreeProvider;

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-archive-"));
    fixture = await createFixtureRepo(join(root, "acme", "widgets"));
    provider = createLocalGitProvider(root);
  });
  after(() => rm(root, { recursive: true, force: true }));

  archiveCases(() => ({ provider, commit: () => provider.resolve({ owner: "acme", repo: "widgets" }, "main") }));

  it("archives the resolved commit, not the work tree", async () => {
    const first = await provider.resolve({ owner: "acme", repo: "widgets" }, "v1.0");
    assert.equal(first.commit, fixture.first);
    const got = await entriesOf(
      await provider.archive({ owner: "acme", repo: "widgets" }, first, { path: "", maxBytes: 1 << 20 }),
    );
    assert.equal(got["docs/guide.md"], undefined, "the second commit's file is not in the first's archive");
  });
});

describe("repository archives from GitHub", () => {
  let github: FakeGithub;
  let provider: TreeProvider;

  before(async () => {
    const blob = (content: string, mode?: "100755") => ({ kind: "blob" as const, content, ...(mode ? { mode } : {}) });
    github = await startFakeGithub({
      "acme/widgets": {
        defaultBranch: "main",
        refs: {
          main: {
            "README.md": blob(FIXTURE_FILES["README.md"]),
            latest: { kind: "blob", mode: "120000", content: "src/main.py" },
            src: {
              kind: "tree",
              children: {
                "main.py": blob(FIXTURE_FILES["src/main.py"]),
                lib: {
                  kind: "tree",
                  children: {
                    "util.py": blob(FIXTURE_FILES["src/lib/util.py"]),
                    deep: {
                      kind: "tree",
                      children: {
                        nested: {
                          kind: "tree",
                          children: { "leaf.txt": blob(FIXTURE_FILES["src/lib/deep/nested/leaf.txt"]) },
                        },
                      },
                    },
                  },
                },
              },
            },
            bin: { kind: "tree", children: { "run.sh": blob(FIXTURE_FILES["bin/run.sh"], "100755") } },
          },
        },
      },
    });
    provider = createGithubProvider({ token: "ghp_test", apiUrl: github.apiUrl });
  });
  after(() => github.close());

  archiveCases(() => ({ provider, commit: () => provider.resolve({ owner: "acme", repo: "widgets" }, undefined) }));

  it("downloads the commit's tarball with the token, follows GitHub's redirect and drops links", async () => {
    const resolved = await provider.resolve({ owner: "acme", repo: "widgets" }, "main");
    const got = await entriesOf(
      await provider.archive({ owner: "acme", repo: "widgets" }, resolved, { path: "", maxBytes: 1 << 20 }),
    );
    assert.equal(got["latest@symlink"], undefined, "a symlink is left out of the bundle");
    const download = github.requests.find((r) => r.path.endsWith(`/tarball/${resolved.commit}`));
    assert.equal(download?.headers.authorization, "Bearer ghp_test");
    assert.ok(github.requests.some((r) => r.path.startsWith("/codeload/")), "the redirect was followed");
  });
});
