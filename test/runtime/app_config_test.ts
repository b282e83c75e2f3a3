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

describe("parseAppConfig", () => {
  it("applies the documented defaults to an empty file", () => {
    const config = parseAppConfig("", "/apps/p/a");
    assert.equal(config.runtime, "python");
    assert.equal(config.python, "python3");
    assert.deepEqual(
      [
        config.minReplicas,
        config.maxReplicas,
        config.replicaConcurrency,
        config.cooldownMs,
        config.responseGracePeriodMs,
      ],
      [0, 1, 1, 30_000, 900_000],
    );
  });

  it("reads every section of the platform's layout", () => {
    const config = parseAppConfig(
      `[deployment]
name = "x"
python = ".venv/bin/python"
[scaling]
min_replicas = 1
max_replicas = 3
replica_concurrency = 4
cooldown = 2.5
response_grace_period = 43200
[dependencies.pip]
requests = "==2.32"
[dependencies.apt]
curl = "*"
[build]
base_image = "python:3.12"
shell_commands = ["echo hi"]
pre_build_commands = []
`,
      "/apps/p/a",
    );
    assert.equal(config.python, "/apps/p/a/.venv/bin/python");
    assert.equal(config.cooldownMs, 2500);
    assert.equal(config.responseGracePeriodMs, 43_200_000);
    assert.deepEqual(config.dependencies.pip, { requests: "==2.32" });
    assert.deepEqual(config.build.shellCommands, ["echo hi"]);
  });

  it("reads a custom runtime with an entrypoint or a url", () => {
    const started = parseAppConfig(
      '[deployment]\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["./serve"]\nhealthcheck_endpoint = "/health"\n',
      "/a",
    );
    assert.deepEqual(started.custom, {
      kind: "process",
      entrypoint: ["./serve"],
      port: undefined,
      healthcheckEndpoint: "/health",
    });
    const remote = parseAppConfig(
      '[deployment]\nruntime = "custom"\n[runtime.custom]\nurl = "http://10.0.0.1:9000/"\n',
      "/a",
    );
    assert.deepEqual(remote.custom, { kind: "url", url: "http://10.0.0.1:9000" });
  });

  it("names an unknown key", () => {
    assert.match(error("[scaling]\nmax_replica = 2\n"), /unknown key scaling\.max_replica/);
    assert.match(error("[deploy]\n"), /unknown key deploy/);
  });

  it("names an out-of-range or mistyped value", () => {
    assert.match(
      error("[scaling]\nresponse_grace_period = 43201\n"),
      /scaling\.response_grace_period must be .* to 43200/,
    );
    assert.match(error("[scaling]\nmax_replicas = 0\n"), /scaling\.max_replicas/);
    assert.match(error("[scaling]\nreplica_concurrency = 1.5\n"), /scaling\.replica_concurrency/);
    assert.match(error('[deployment]\nruntime = "node"\n'), /deployment\.runtime must be one of python, custom/);
    assert.match(error("[scaling]\nmin_replicas = 3\nmax_replicas = 2\n"), /min_replicas \(3\) must not exceed/);
  });

  it("refuses a custom runtime without exactly one of entrypoint or url", () => {
    assert.match(error('[deployment]\nruntime = "custom"\n'), /needs a \[runtime\.custom\] table/);
    assert.match(
      error('[deployment]\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["a"]\nurl = "http://x"\n'),
      /exactly one of entrypoint/,
    );
  });

  it("reports invalid TOML", () => {
    assert.match(error("[scaling\n"), /not valid TOML/);
  });
});
