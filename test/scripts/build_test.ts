/**
 * The build's cache (scripts/build.ts): its key follows every input's bytes, and its lock is never left
 * held by a build that died. (The build itself is tested by test/dashboard/production_build_test.ts and
 * test/client/package_test.ts, which start and pack what it built.)
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, utimesSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { buildInputsHash, takeBuildLock } from "../../scripts/build.ts";

async function write(root: string, files: Record<string, string>): Promise<void> {
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(root, dirname(path)), { recursive: true });
    await writeFile(join(root, path), text);
  }
}

describe("the build's cache key", () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-build-key-"));
    await write(root, {
      "client/mod.ts": "export const a = 1;\n",
      "client/dashboard/app.js": "export {};\n",
      "server/main.ts": "export {};\n",
      "server/runtime/_worker.py": "print(1)\n",
      "generated/api.d.ts": "export {};\n",
      "tsconfig.json": "{}\n",
    });
  });
  after(() => rm(root, { recursive: true, force: true }));

  it("is the same for the same bytes, whatever the files' times", () => {
    const key = buildInputsHash(root);
    utimesSync(join(root, "server", "main.ts"), new Date(0), new Date(0));
    assert.equal(buildInputsHash(root), key);
  });

  it("changes with any input's bytes, an added file, and the build's settings", async () => {
    const seen = new Set([buildInputsHash(root)]);
    const changes: Record<string, string>[] = [
      { "client/mod.ts": "export const a = 2;\n" },
      { "server/runtime/_worker.py": "print(2)\n" },
      { "client/dashboard/app.js": "export const b = 1;\n" },
      { "server/new_module.ts": "export {};\n" },
      { "generated/validators.cjs": "module.exports = {};\n" },
      { "tsconfig.json": '{ "compilerOptions": {} }\n' },
      { "tsconfig.build.json": "{}\n" },
      { "package-lock.json": "{}\n" },
    ];
    for (const change of changes) {
      await write(root, change);
      const key = buildInputsHash(root);
      assert.ok(!seen.has(key), `the key did not change with ${Object.keys(change)[0]}`);
      seen.add(key);
    }
  });
});

describe("the build's lock", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-build-lock-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("is taken once: a second try finds it held by this live process", () => {
    const lock = join(dir, "held.lock");
    assert.equal(takeBuildLock(lock), true);
    assert.equal(readFileSync(lock, "utf8"), String(process.pid));
    assert.equal(takeBuildLock(lock), false);
    assert.ok(existsSync(lock), "a live holder's lock stays");
  });

  it("left by a process that died, is removed, and the next try takes it", async () => {
    const lock = join(dir, "dead.lock");
    const dead = spawnSync(process.execPath, ["-e", "console.log(process.pid)"], { encoding: "utf8" });
    await writeFile(lock, dead.stdout.trim());
    assert.equal(takeBuildLock(lock), false);
    assert.equal(takeBuildLock(lock), true);
    assert.equal(readFileSync(lock, "utf8"), String(process.pid));
  });

  it("naming no process, is left alone while new and removed once old", async () => {
    const lock = join(dir, "unnamed.lock");
    await writeFile(lock, "");
    assert.equal(takeBuildLock(lock), false);
    assert.ok(existsSync(lock), "a lock just made may not have its process's id yet");
    const old = new Date(Date.now() - 60_000);
    utimesSync(lock, old, old);
    assert.equal(takeBuildLock(lock), false);
    assert.equal(takeBuildLock(lock), true);
  });
});
