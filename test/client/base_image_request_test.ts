import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { baseImageRequestFromToml } from "../../client/base_image_request.ts";

const FIXTURE = join(import.meta.dirname, "_fixtures", "apps", "p-test", "demo", "runplane.toml");
const b64 = (text: string) => Buffer.from(text).toString("base64");

describe("baseImageRequestFromToml", () => {
  it("maps dependencies to each manager's spec syntax and Base64-encodes the commands", async () => {
    assert.deepEqual(baseImageRequestFromToml(await readFile(FIXTURE, "utf8")), {
      aptPackages: ["curl", "git=1:2.39.5-0+deb12u1"],
      pipRequirements: ["requests==2.32.0", "numpy>=2.0", "rich"],
      baseImageUri: "python:3.12-slim",
      preBuildCommands: [b64("apt-get update")],
      shellCommands: [b64("echo hello > /greeting"), b64("chmod +x /usr/local/bin/tool")],
    });
  });

  it("writes conda versions with a single =", () => {
    assert.deepEqual(baseImageRequestFromToml('[dependencies.conda]\nnumpy = "1.26"\nscipy = ""'), {
      condaPackages: ["numpy=1.26", "scipy"],
    });
  });

  it("answers an empty request for a config without dependencies or build", () => {
    assert.deepEqual(baseImageRequestFromToml("[scaling]\nmin_replicas = 1"), {});
  });

  it("names the section at fault", () => {
    assert.throws(
      () => baseImageRequestFromToml("[dependencies.pip]\nrequests = 2"),
      /\[dependencies\.pip\] requests must be a version string/,
    );
    assert.throws(
      () => baseImageRequestFromToml('[build]\nshell_commands = "echo"'),
      /\[build\] shell_commands must be a list/,
    );
    assert.throws(() => baseImageRequestFromToml("[build"), /^Error: Invalid TOML/);
  });
});
