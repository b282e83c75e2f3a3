import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, symlink, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { gunzipSync } from "node:zlib";
import { extract } from "tar-stream";
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

/** The entries of a packed bundle, in order, folders with a trailing `/`, each with its mode. */
async function entriesOf(bundle: Uint8Array): Promise<string[]> {
  const tar = extract();
  const names: string[] = [];
  tar.end(gunzipSync(bundle));
  for await (const entry of tar) {
    const { name, mode, mtime, uid, gid } = entry.header;
    assert.equal(mtime.getTime(), 0, `${name}: mtime`);
    assert.deepEqual([uid, gid], [0, 0], `${name}: owner`);
    names.push(`${name} ${mode.toString(8)}`);
    entry.resume();
  }
  return names;
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

  it("packs entries in path order with mtime 0, owner 0 and only the executable bit", async () => {
    const app = join(root, "modes");
    await write(app, { "runplane.toml": "", "bin/run": "#!/bin/sh\n", "b.txt": "", "a.txt": "" });
    await chmod(join(app, "bin/run"), 0o750);
    await chmod(join(app, "a.txt"), 0o600);
    assert.deepEqual(await entriesOf((await packBundle(app)).bytes), [
      "a.txt 644",
      "b.txt 644",
      "bin/ 755",
      "bin/run 755",
      "runplane.toml 644",
    ]);
  });

  it("packs equal folders to equal bytes whatever their times", async () => {
    const a = join(root, "same-a");
    const b = join(root, "same-b");
    await write(a, { "runplane.toml": "x", "lib/m.py": "1" });
    await write(b, { "lib/m.py": "1", "runplane.toml": "x" });
    await utimes(join(b, "lib/m.py"), new Date(2001, 1, 1), new Date(2001, 1, 1));
    await utimes(join(b, "lib"), new Date(2002, 1, 1), new Date(2002, 1, 1));
    assert.deepEqual((await packBundle(a)).bytes, (await packBundle(b)).bytes);
    await writeFile(join(b, "lib/m.py"), "2");
    assert.notDeepEqual((await packBundle(a)).bytes, (await packBundle(b)).bytes);
  });

  it("matches a name pattern against every segment, with * and ? inside one name", async () => {
    const app = join(root, "names");
    await write(app, {
      "runplane.toml": "",
      "tmp1/a.py": "",
      "tmp12/b.py": "",
      "src/tmp2/c.py": "",
      "src/keep.log.txt": "",
      "src/drop.log": "",
      "c++.txt": "",
    });
    const { bytes } = await packBundle(app, { exclude: ["tmp?", "*.log", "c++.txt"] });
    assert.deepEqual(await entriesOf(bytes), [
      "runplane.toml 644",
      "src/ 755",
      "src/keep.log.txt 644",
      "tmp12/ 755",
      "tmp12/b.py 644",
    ]);
  });

  it("matches a path pattern from the root, with ** for any number of folders", async () => {
    const app = join(root, "paths");
    await write(app, {
      "runplane.toml": "",
      "docs/a.pdf": "",
      "docs/x/b.pdf": "",
      "docs/x/keep.md": "",
      "assets/big/y/z.bin": "",
      "assets/bigger.bin": "",
      "lib/cache/1": "",
      "lib/a/b/cache/2": "",
      "lib/cachexyz": "",
      "sub/docs/a.pdf": "",
    });
    const { bytes, files } = await packBundle(app, {
      exclude: ["docs/*.pdf", "docs/**/*.pdf", "/assets/big/**", "lib/**/cache"],
    });
    assert.deepEqual(await entriesOf(bytes), [
      "assets/ 755",
      "assets/bigger.bin 644",
      "docs/ 755",
      "docs/x/ 755",
      "docs/x/keep.md 644",
      "lib/ 755",
      "lib/a/ 755",
      "lib/a/b/ 755",
      "lib/cachexyz 644",
      "runplane.toml 644",
      "sub/ 755",
      "sub/docs/ 755",
      "sub/docs/a.pdf 644",
    ]);
    assert.equal(files, 5);
  });

  it("imports nothing from the server", async () => {
    const source = await readFile(new URL("../../client/bundle.ts", import.meta.url), "utf8");
    assert.doesNotMatch(source, /from "[^"]*server\//);
  });
});
