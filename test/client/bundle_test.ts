import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { DEFAULT_EXCLUDES, packBundle } from "../../client/bundle.ts";
import { extractBundle } from "../../server/deployments/mod.ts";

async function write(root: string, files: Record<string, string>): Promise<void> {
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(root, path, ".."), { recursive: true });
    await writeFile(join(root, path), text);
  }
}

async function listFiles(dir: string): Promise<string[]> {
  return (await readdir(dir, { recursive: true, withFileTypes: true }))
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath ?? e.path, e.name).slice(dir.length + 1))
    .sort();
}

describe("packBundle", () => {
  let root: string;
  before(async () => (root = await mkdtemp(join(tmpdir(), "runplane-pack-"))));
  after(() => rm(root, { recursive: true, force: true }));

  it("packs an app folder without VCS data, caches, virtualenvs, links or what it is told to skip", async () => {
    const app = join(root, "app");
    await write(app, {
      "runplane.toml": "",
      "main.py": "x",
      "lib/util.py": "y",
      "lib/__pycache__/util.cpython-311.pyc": "z",
      "lib/old.pyc": "z",
      ".git/HEAD": "ref",
      ".venv/bin/python": "",
      "data/big/file.bin": "b",
      "data/keep.txt": "k",
      "notes.md": "n",
    });
    await symlink("/etc/passwd", join(app, "passwd"));
    const { bytes, files } = await packBundle(app, { exclude: ["data/big/**", "*.md"] });
    assert.deepEqual([...DEFAULT_EXCLUDES], [".git", "__pycache__", ".venv", "*.pyc"]);
    const out = join(root, "out");
    await extractBundle(bytes, out);
    assert.deepEqual(await listFiles(out), ["data/keep.txt", "lib/util.py", "main.py", "runplane.toml"]);
    assert.equal(files, 4);
  });

  it("packs an unchanged folder to the same bytes", async () => {
    const a = join(root, "a");
    const b = join(root, "b");
    await write(a, { "runplane.toml": "", "z.py": "1", "a/b.py": "2" });
    await new Promise((resolve) => setTimeout(resolve, 20));
    await write(b, { "a/b.py": "2", "z.py": "1", "runplane.toml": "" });
    assert.deepEqual((await packBundle(a)).bytes, (await packBundle(b)).bytes);
  });
});
