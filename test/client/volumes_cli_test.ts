/**
 * `runplane volumes` against a server: create, list, ls, delete; cp of a file and of a folder both ways,
 * with plain lines when not on a terminal, a second cp skipping what is there (same size and sha256),
 * and a changed file copied again.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { HAS_SCRIPT, runCliOnTerminal, runMain } from "../_helpers/cli.ts";
import { startFaultProxy } from "./_fault_proxy.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

describe("runplane volumes against a server", { timeout: 180_000 }, () => {
  let t: TestServer;
  let env: Record<string, string>;
  let dir: string;

  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_VOLUMES_MODE: "directory" } });
    const { token } = await t.mintToken({ scopes: ["deploy", "rest"] });
    env = { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: token };
    dir = mkdtempSync(join(tmpdir(), "runplane-volumes-cli-"));
  });
  after(async () => {
    await t?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("creates, lists and deletes a volume", async () => {
    const created = await runMain(["volumes", "create", `${TEST_PROJECT}:weights`, "--size-gb", "0.5"], { env });
    assert.equal(created.code, 0, created.stderr);
    assert.equal(created.stdout, `Created ${TEST_PROJECT}:weights (0.5 GiB)\n`);
    const again = await runMain(["volumes", "create", "scratch", "--size-gb", "0.0625"], { env });
    assert.equal(again.code, 0, again.stderr);
    const listed = await runMain(["volumes", "list"], { env });
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(
      listed.stdout,
      /^NAME +SIZE +USED +CREATED\nscratch +0\.0625 GiB +0\.0 MiB +\S+Z\nweights +0\.5 GiB +0\.0 MiB +\S+Z\n$/,
    );
    const resized = await runMain(["volumes", "create", "scratch", "--size-gb", "1"], { env });
    assert.equal(resized.code, 1);
    assert.match(resized.stderr, /not resized/);
    const deleted = await runMain(["volumes", "delete", `${TEST_PROJECT}:scratch`, "--yes"], {
      env,
      stdin: Readable.from([]),
    });
    assert.equal(deleted.code, 0, deleted.stderr);
    const json = await runMain(["volumes", "list", TEST_PROJECT, "--json"], { env });
    assert.deepEqual((JSON.parse(json.stdout) as { volumes: Array<{ name: string }> }).volumes.map((v) => v.name), [
      "weights",
    ]);
  });

  it("copies a file and a folder in and out, skipping what is there already", async () => {
    const model = join(dir, "model.bin");
    writeFileSync(model, randomBytes(3 * 1024 * 1024));
    const up = await runMain(["volumes", "cp", model, `${TEST_PROJECT}:weights/models/model.bin`], { env });
    assert.equal(up.code, 0, up.stderr);
    assert.match(
      up.stdout,
      /^uploaded .*model\.bin -> p-test:weights\/models\/model\.bin \(3145728 bytes, sha256 [0-9a-f]{12}\)\n$/,
    );
    const skipped = await runMain(["volumes", "cp", model, `${TEST_PROJECT}:weights/models/model.bin`], { env });
    assert.match(skipped.stdout, /^skipped p-test:weights\/models\/model\.bin \(already there/);
    const tree = join(dir, "tree");
    await mkdir(join(tree, "a", "b"), { recursive: true });
    writeFileSync(join(tree, "top.txt"), "top");
    writeFileSync(join(tree, "a", "one.txt"), "one");
    writeFileSync(join(tree, "a", "b", "two.txt"), "two");
    const folder = await runMain(["volumes", "cp", "-r", tree, `${TEST_PROJECT}:weights/tree`], { env });
    assert.equal(folder.code, 0, folder.stderr);
    assert.equal(folder.stdout.split("\n").filter((l) => l.startsWith("uploaded")).length, 3);
    const ls = await runMain(["volumes", "ls", `${TEST_PROJECT}:weights/tree/`], { env });
    assert.match(
      ls.stdout,
      /^PATH +SIZE +MODIFIED +SHA256\ntree\/a\/b\/two\.txt +3 .*\ntree\/a\/one\.txt +3 .*\ntree\/top\.txt +3 .*\n$/,
    );
    const back = join(dir, "back");
    const down = await runMain(["volumes", "cp", "-r", `${TEST_PROJECT}:weights/tree`, back], { env });
    assert.equal(down.code, 0, down.stderr);
    assert.equal(readFileSync(join(back, "a", "b", "two.txt"), "utf8"), "two");
    assert.equal(readFileSync(join(back, "top.txt"), "utf8"), "top");
    // A second download skips the files that match; a changed one is fetched again.
    writeFileSync(join(back, "top.txt"), "changed");
    const resumed = await runMain(["volumes", "cp", "-r", `${TEST_PROJECT}:weights/tree`, back], { env });
    const lines = resumed.stdout.trim().split("\n");
    assert.equal(lines.filter((l) => l.startsWith("skipped")).length, 2, resumed.stdout);
    assert.equal(lines.filter((l) => l.startsWith("downloaded")).length, 1, resumed.stdout);
    assert.equal(readFileSync(join(back, "top.txt"), "utf8"), "top");
    const single = await runMain(["volumes", "cp", `${TEST_PROJECT}:weights/models/model.bin`, join(dir, "copy.bin")], {
      env,
    });
    assert.equal(single.code, 0, single.stderr);
    assert.deepEqual(readFileSync(join(dir, "copy.bin")), readFileSync(model));
    const json = await runMain(["volumes", "cp", model, `${TEST_PROJECT}:weights/models/model.bin`, "--json"], { env });
    assert.equal((JSON.parse(json.stdout) as { files: Array<{ skipped: boolean }> }).files[0].skipped, true);
  });

  it("tries a whole file again after a reset connection and a 503 (3 tries), then gives up", async () => {
    const model = join(dir, "retried.bin");
    writeFileSync(model, randomBytes(256 * 1024));
    let puts = 0;
    const proxy = await startFaultProxy(t.url, {
      fault: (request) => {
        if (request.method !== "PUT") return undefined;
        puts += 1;
        return puts === 1 ? "reset" : puts === 2 ? { status: 503, retryAfter: 1 } : undefined;
      },
    });
    try {
      const through = { ...env, RUNPLANE_BASE_URL: proxy.url };
      const copied = await runMain(["volumes", "cp", model, `${TEST_PROJECT}:weights/retried.bin`], { env: through });
      assert.equal(copied.code, 0, copied.stderr);
      assert.match(copied.stderr, /trying again \(2 of 3\)[\s\S]*trying again \(3 of 3\)/);
      assert.match(copied.stdout, /^uploaded /);
      assert.equal(puts, 3);
      assert.deepEqual(await proxy.contractErrors(), []);
    } finally {
      await proxy.close();
    }
    const failing = await startFaultProxy(t.url, {
      fault: (request) => (request.method === "PUT" ? "reset" : undefined),
    });
    try {
      const refused = await runMain(["volumes", "cp", model, `${TEST_PROJECT}:weights/failing.bin`], {
        env: { ...env, RUNPLANE_BASE_URL: failing.url },
      });
      assert.equal(refused.code, 1);
      assert.equal(failing.seen.filter((r) => r.method === "PUT").length, 3, "three tries, then no more");
    } finally {
      await failing.close();
    }
  });

  it(
    "shows a progress bar of bytes on a terminal",
    { skip: HAS_SCRIPT ? false : "util-linux script is not installed" },
    async () => {
      const model = join(dir, "shown.bin");
      writeFileSync(model, randomBytes(2 * 1024 * 1024));
      const { code, output } = await runCliOnTerminal(
        ["volumes", "cp", model, `${TEST_PROJECT}:weights/shown.bin`],
        env,
      );
      assert.equal(code, 0, output);
      assert.match(output, /p-test:weights\/shown\.bin \[#+ *\] \d+\.\d MiB\/2\.0 MiB/);
      assert.match(output, /uploaded .*shown\.bin/);
    },
  );

  it("refuses a copy between two local paths, and a folder without -r", async () => {
    const local = await runMain(["volumes", "cp", "a", "b"], { env });
    assert.equal(local.code, 2);
    const folder = await runMain(["volumes", "cp", dir, `${TEST_PROJECT}:weights/x`], { env });
    assert.equal(folder.code, 2);
    assert.match(folder.stderr, /pass -r/);
  });
});
