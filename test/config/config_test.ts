import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { autoWorkers, ConfigError, loadConfig, settingProblem } from "../../server/config.ts";
import { DataDirError, prepareDataDir } from "../../server/data_dir.ts";
import { createServer } from "../../server/mod.ts";

describe("loadConfig", () => {
  it("applies defaults", () => {
    const config = loadConfig({ RUNPLANE_DATA_DIR: join(tmpdir(), "runplane-config-default") });
    assert.equal(config.port, 8080);
    assert.equal(config.bodyLimitBytes, 10 * 1024 * 1024);
    assert.equal(config.logLevel, "info");
    assert.equal(config.responseCheck, true);
  });

  it("lists every bad value in one error", () => {
    assert.throws(
      () => loadConfig({ PORT: "http", RUNPLANE_LOG_LEVEL: "loud", RUNPLANE_APPS_DIR: " " }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError);
        assert.equal(error.problems.length, 3);
        assert.match(error.message, /PORT="http": must be a whole number/);
        assert.match(error.message, /RUNPLANE_LOG_LEVEL="loud": must be one of/);
        assert.match(error.message, /RUNPLANE_APPS_DIR=" ": must not be empty/);
        return true;
      },
    );
  });

  it("reads settings without touching the disk; the server makes the data dir at start", async () => {
    const parent = await mkdtemp(join(tmpdir(), "runplane-config-"));
    try {
      const dataDir = join(parent, "nested", "data");
      const config = loadConfig({ PORT: "0", RUNPLANE_DATA_DIR: dataDir, RUNPLANE_LOG_LEVEL: "silent" });
      assert.equal(config.dataDir, dataDir);
      assert.ok(!existsSync(dataDir), "loadConfig created nothing");
      const server = await createServer(config);
      try {
        assert.equal((await stat(dataDir)).mode & 0o777, 0o700, "created private to the server's user");
      } finally {
        await server.close();
      }
    } finally {
      await rm(parent, { recursive: true, force: true });
    }
  });

  it("an unwritable data dir stops the start, in the words of a bad setting", async () => {
    const parent = await mkdtemp(join(tmpdir(), "runplane-config-"));
    // A folder under a regular file cannot be created, even by root.
    const file = join(parent, "file");
    await writeFile(file, "");
    try {
      const dataDir = join(file, "data");
      const config = loadConfig({ RUNPLANE_DATA_DIR: dataDir, RUNPLANE_LOG_LEVEL: "silent" });
      assert.throws(() => prepareDataDir(dataDir), new DataDirError(`${dataDir} is not a writable folder (ENOTDIR)`));
      await assert.rejects(createServer(config), (error: unknown) => {
        assert.ok(error instanceof DataDirError);
        assert.equal(
          settingProblem("dataDir", error.message, { env: { RUNPLANE_DATA_DIR: dataDir } }),
          `RUNPLANE_DATA_DIR=${JSON.stringify(dataDir)}: ${dataDir} is not a writable folder (ENOTDIR)`,
        );
        assert.match(
          settingProblem("dataDir", error.message, { env: {}, overrides: { dataDir } }),
          /^--data-dir=".*": .* is not a writable folder \(ENOTDIR\)$/,
        );
        return true;
      });
    } finally {
      await rm(parent, { recursive: true, force: true });
    }
  });

  it("lets flag values override the environment", () => {
    const config = loadConfig({ PORT: "1", RUNPLANE_DATA_DIR: join(tmpdir(), "runplane-config-default") }, {
      port: "2",
    });
    assert.equal(config.port, 2);
  });

  it("runs one worker per two cores by default from 4 cores up (at most 16), one process below", () => {
    assert.deepEqual([1, 2, 3, 4, 8, 16, 64].map(autoWorkers), [1, 1, 1, 2, 4, 8, 16]);
    const dataDir = join(tmpdir(), "runplane-config-default");
    assert.equal(loadConfig({ RUNPLANE_DATA_DIR: dataDir }).workers, autoWorkers(cpus().length));
    assert.equal(loadConfig({ RUNPLANE_DATA_DIR: dataDir, RUNPLANE_WORKERS: "3" }).workers, 3);
  });
});
