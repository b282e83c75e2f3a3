/**
 * The data dir and its `keys/` folder are 0700 and the server's whenever the server runs: a folder made
 * looser before the first start is tightened (and the log says so); one that cannot be made private, or a
 * `keys` link to elsewhere, stops the start with what to do.
 */
import assert from "node:assert/strict";
import { chmod, chown, mkdir, mkdtemp, rm, stat, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { DataDirError, prepareDataDir } from "../../server/data_dir.ts";
import { startTestServer } from "../_helpers/server.ts";

async function modeOf(path: string): Promise<number> {
  return (await stat(path)).mode & 0o777;
}

/** A logger that keeps what `prepareDataDir` warns. */
function recordingLogger(): {
  warn(fields: Record<string, unknown>, message: string): void;
  lines: Array<[Record<string, unknown>, string]>;
} {
  const lines: Array<[Record<string, unknown>, string]> = [];
  return { lines, warn: (fields, message) => void lines.push([fields, message]) };
}

describe("the data dir's modes at start", () => {
  let parent: string;
  let umask: number;
  before(async () => {
    // The most permissive umask: what the server makes must not depend on the one it was started with.
    umask = process.umask(0);
    parent = await mkdtemp(join(tmpdir(), "runplane-data-dir-"));
  });
  after(async () => {
    process.umask(umask);
    await rm(parent, { recursive: true, force: true });
  });

  it("makes a 0755 data dir and its 0755 keys folder, made before the first start, 0700 and logs each", async () => {
    const dataDir = join(parent, "operator-made");
    await mkdir(join(dataDir, "keys"), { recursive: true, mode: 0o755 });
    await chmod(dataDir, 0o755);
    await chmod(join(dataDir, "keys"), 0o755);
    const t = await startTestServer({ dataDir });
    try {
      assert.equal(await modeOf(dataDir), 0o700);
      assert.equal(await modeOf(join(dataDir, "keys")), 0o700);
      for (const path of [dataDir, join(dataDir, "keys")]) {
        const line = t.logs.find((l) => l.path === path);
        assert.ok(line, `a log line names ${path}: ${t.rawLogs()}`);
        assert.equal(line.level, 40, "a warning");
        assert.equal(line.old_mode, "0755");
        assert.equal(line.new_mode, "0700");
        assert.match(String(line.msg), /was 0755, open to other users: made it 0700/);
      }
    } finally {
      await t.close();
    }
  });

  it("says nothing of a data dir that is 0700 already", () => {
    const logger = recordingLogger();
    const dataDir = join(parent, "private");
    prepareDataDir(dataDir, { logger });
    prepareDataDir(dataDir, { logger });
    assert.deepEqual(logger.lines, []);
  });

  it("fixes the folder a data dir link names, the operator's choice of where the data lives", async () => {
    const target = join(parent, "linked-target");
    await mkdir(target, { mode: 0o750 });
    await chmod(target, 0o750);
    const link = join(parent, "linked");
    await symlink(target, link);
    const logger = recordingLogger();
    prepareDataDir(link, { logger });
    assert.equal(await modeOf(target), 0o700);
    assert.equal(logger.lines.length, 1);
  });

  it("refuses a keys folder that is a link to elsewhere, and leaves what it names alone", async () => {
    const dataDir = join(parent, "keys-link");
    const elsewhere = join(parent, "elsewhere");
    await mkdir(dataDir, { mode: 0o700 });
    await mkdir(elsewhere, { mode: 0o755 });
    await chmod(elsewhere, 0o755);
    await symlink(elsewhere, join(dataDir, "keys"));
    assert.throws(
      () => prepareDataDir(dataDir),
      new DataDirError(
        `${
          join(dataDir, "keys")
        } is a symbolic link; the keys must live in the data dir itself: replace the link with a folder (move the files it points to into it)`,
      ),
    );
    assert.equal(await modeOf(elsewhere), 0o755, "the link's target was not touched");
  });

  it("refuses a data dir another user owns, saying how to give it to the server's user", async (t) => {
    const uid = process.geteuid?.();
    if (uid !== 0) return t.skip("only root can give a folder to another user");
    const dataDir = join(parent, "someone-else's");
    await mkdir(dataDir, { mode: 0o700 });
    await chown(dataDir, 4242, 4242);
    assert.throws(() => prepareDataDir(dataDir), (error: unknown) => {
      assert.ok(error instanceof DataDirError);
      assert.match(error.message, new RegExp(`^${dataDir} belongs to uid 4242, not to the server's user \\(uid 0\\)`));
      assert.match(error.message, new RegExp(`chown -R 0 ${dataDir}.*chmod 700 ${dataDir}`));
      return true;
    });
  });
});
