import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { ConfigError, loadConfig } from "../../server/config.ts";

describe("loadConfig", () => {
  it("applies defaults", () => {
    const config = loadConfig({ RUNPLANE_DATA_DIR: join(tmpdir(), "runplane-config-default") });
    assert.equal(config.port, 8080);
    assert.equal(config.bodyLimitBytes, 10 * 1024 * 1024);
    assert.equal(config.logLevel, "info");
    assert.equal(config.responseCheck, true);
  });

  it("lists every bad value in one error", async () => {
    const parent = await mkdtemp(join(tmpdir(), "runplane-config-"));
    // A folder under a regular file cannot be created, even by root.
    const file = join(parent, "file");
    await writeFile(file, "");
    try {
      assert.throws(
        () => loadConfig({ PORT: "http", RUNPLANE_LOG_LEVEL: "loud", RUNPLANE_DATA_DIR: join(file, "data") }),
        (error: unknown) => {
          assert.ok(error instanceof ConfigError);
          assert.equal(error.problems.length, 3);
          assert.match(error.message, /PORT="http": must be a whole number/);
          assert.match(error.message, /RUNPLANE_LOG_LEVEL="loud": must be one of/);
          assert.match(error.message, /RUNPLANE_DATA_DIR=.*is not a writable folder \(ENOTDIR\)/);
          return true;
        },
      );
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
});
