/** `[volumes]` and `[build] volumes` in runplane.toml: each mistake is a load error naming its key. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { AppConfigError, parseAppConfig } from "../../server/runtime/mod.ts";

function error(text: string): string {
  try {
    parseAppConfig(text, "/apps/p/a");
  } catch (caught) {
    assert.ok(caught instanceof AppConfigError);
    return caught.message;
  }
  throw new Error("expected a load error");
}

describe("[volumes] in runplane.toml", () => {
  it("takes a path or a table; volume defaults to the key, read_only to false; builds see none by default", () => {
    const config = parseAppConfig(
      '[volumes]\nweights = "/models"\ncache = { volume = "shared-cache", path = "/srv/cache", read_only = true }\n',
      "/apps/p/a",
    );
    assert.deepEqual(config.volumes, [
      { name: "weights", volume: "weights", path: "/models", readOnly: false },
      { name: "cache", volume: "shared-cache", path: "/srv/cache", readOnly: true },
    ]);
    assert.equal(config.build.volumes, false);
    assert.deepEqual(parseAppConfig("", "/apps/p/a").volumes, []);
    assert.equal(parseAppConfig("[build]\nvolumes = true\n", "/apps/p/a").build.volumes, true);
  });

  it("refuses paths that are relative, unnormalised, / or a system folder, naming the key", () => {
    for (const path of ["models", "/models/", "/a/../models", "//models", "/", "/models/./x", "/a\\nb"]) {
      assert.match(error(`[volumes]\nweights = ${JSON.stringify(path)}\n`), /^volumes\.weights must be an absolute/);
    }
    for (
      const path of [
        "/usr/local/models",
        "/etc",
        "/proc/x",
        "/dev/shm",
        "/sys",
        "/tmp/w",
        "/home",
        "/home/runplane/w",
        "/lib64",
        "/bin",
      ]
    ) {
      assert.match(error(`[volumes]\nw = "${path}"\n`), /^volumes\.w: ".*" overlaps /, path);
    }
    assert.match(error('[volumes]\nw = { path = "/proc" }\n'), /^volumes\.w\.path: /);
  });

  it("refuses duplicate and nested paths, too many entries, bad names and unknown keys", () => {
    assert.match(error('[volumes]\na = "/m"\nb = "/m"\n'), /^volumes\.b is shown at \/m, which overlaps volumes\.a/);
    assert.match(error('[volumes]\na = "/m"\nb = "/m/sub"\n'), /^volumes\.b .* overlaps volumes\.a/);
    const many = Array.from({ length: 9 }, (_, i) => `v${i} = "/m${i}"`).join("\n");
    assert.match(error(`[volumes]\n${many}\n`), /^volumes has 9 entries; at most 8/);
    assert.match(error('[volumes]\nW = "/m"\n'), /^volumes\.W names volume "W"/);
    assert.match(error('[volumes]\nw = { volume = "../other", path = "/m" }\n'), /^volumes\.w\.volume names volume/);
    assert.match(error('[volumes]\nw = { path = "/m", mode = "rw" }\n'), /^unknown key volumes\.w\.mode/);
    assert.match(error('[volumes]\nw = { volume = "w" }\n'), /^volumes\.w\.path is missing/);
    assert.match(
      error('[volumes]\nw = { path = "/m", read_only = "yes" }\n'),
      /^volumes\.w\.read_only must be true or false/,
    );
    assert.match(error("[volumes]\nw = 3\n"), /^volumes\.w must be a path/);
    assert.match(error('volumes = "/m"\n'), /^volumes must be a table/);
    assert.match(error('[build]\nvolumes = "yes"\n'), /^build\.volumes must be true or false/);
  });
});
