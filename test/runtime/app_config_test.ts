import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { AppConfigError, type AppConfigOptions, parseAppConfig } from "../../server/runtime/mod.ts";

function error(text: string, options?: AppConfigOptions): string {
  try {
    parseAppConfig(text, "/apps/p/a", options);
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
      '[deployment]\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["./serve"]\nhealthcheck_endpoint = "/health"\n'
        + 'readycheck_endpoint = "/ready"\n',
      "/a",
    );
    assert.deepEqual(started.custom, {
      kind: "process",
      entrypoint: ["./serve"],
      port: undefined,
      healthcheckEndpoint: "/health",
      readycheckEndpoint: "/ready",
    });
    const remote = parseAppConfig(
      '[deployment]\nruntime = "custom"\n[runtime.custom]\nurl = "http://10.0.0.1:9000/"\n',
      "/a",
      { allowExternalRuntimes: true },
    );
    assert.deepEqual(remote.custom, { kind: "url", url: "http://10.0.0.1:9000" });
  });

  it("refuses a readycheck_endpoint that is no path, or that comes with a url", () => {
    const custom = '[deployment]\nruntime = "custom"\n[runtime.custom]\n';
    assert.match(
      error(`${custom}entrypoint = ["./serve"]\nreadycheck_endpoint = "ready"\n`),
      /runtime\.custom\.readycheck_endpoint must be a path starting with \//,
    );
    assert.match(
      error(`${custom}url = "http://10.0.0.1:9000"\nreadycheck_endpoint = "/ready"\n`, { allowExternalRuntimes: true }),
      /runtime\.custom\.readycheck_endpoint only applies with entrypoint/,
    );
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

  it("reads runtime.custom.dockerfile, and refuses it with base_image, [dependencies] or a path leaving the bundle", () => {
    const custom = '[deployment]\nruntime = "custom"\n[runtime.custom]\ndockerfile = "docker/Dockerfile"\n';
    const config = parseAppConfig(custom, "/a");
    assert.deepEqual(config.custom, {
      kind: "process",
      dockerfile: "docker/Dockerfile",
      port: undefined,
      healthcheckEndpoint: undefined,
      readycheckEndpoint: undefined,
    });
    assert.match(error(`${custom}[build]\nbase_image = "python:3.12"\n`), /dockerfile and \[build\] base_image/);
    assert.match(error(`${custom}[dependencies.apt]\nffmpeg = "*"\n`), /\[dependencies\.apt\] with a RUN step/);
    for (const path of ["../Dockerfile", "/etc/passwd", "a/../../b", ""]) {
      const toml = `[deployment]\nruntime = "custom"\n[runtime.custom]\ndockerfile = ${JSON.stringify(path)}\n`;
      assert.match(error(toml), /runtime\.custom\.dockerfile must be a (relative path|non-empty string)/);
    }
    assert.match(
      error('[deployment]\nruntime = "custom"\n[runtime.custom]\ndockerfile = "Dockerfile"\nurl = "http://x"\n'),
      /does not go with url/,
    );
  });

  it("refuses a runtime.custom.url unless external runtimes are allowed, naming the setting", () => {
    const toml = '[deployment]\nruntime = "custom"\n[runtime.custom]\nurl = "http://127.0.0.1:9/internal-admin"\n';
    assert.match(error(toml), /runtime\.custom\.url .*not allowed.*RUNPLANE_ALLOW_EXTERNAL_RUNTIMES/);
    assert.match(error(toml, { allowExternalRuntimes: false }), /runtime\.custom\.url/);
  });

  it("reads [env] and [network] egress, with their defaults", () => {
    const plain = parseAppConfig("", "/a");
    assert.deepEqual(plain.env, {});
    assert.equal(plain.egress, true);
    const config = parseAppConfig(
      '[env]\nMODEL_NAME = "small"\n_private = ""\nHF_HOME = "/tmp/hf"\n[network]\negress = false\n',
      "/a",
    );
    assert.deepEqual(config.env, { MODEL_NAME: "small", _private: "", HF_HOME: "/tmp/hf" });
    assert.equal(config.egress, false);
    assert.equal(parseAppConfig("[network]\negress = true\n", "/a").egress, true);
  });

  it("refuses [env] names of the platform, RUNPLANE_ ones and LD_ ones, naming the variable", () => {
    assert.match(error('[env]\nRUNPLANE_X = "1"\n'), /env\.RUNPLANE_X is reserved: names starting with RUNPLANE_/);
    assert.match(error('[env]\nRUNPLANE_MASTER_KEY = "k"\n'), /env\.RUNPLANE_MASTER_KEY is reserved/);
    for (const name of ["PATH", "HOME", "PORT", "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "VIRTUAL_ENV"]) {
      assert.match(error(`[env]\n${name} = "x"\n`), new RegExp(`env\\.${name} is set by the platform`));
    }
    assert.match(error('[env]\nCUDA_VISIBLE_DEVICES = "0"\n'), /env\.CUDA_VISIBLE_DEVICES is set by the platform/);
    assert.match(
      error('[env]\nCUDA_DEVICE_ORDER = "FASTEST_FIRST"\n'),
      /env\.CUDA_DEVICE_ORDER is set by the platform/,
    );
    assert.match(error('[env]\nLD_PRELOAD = "/tmp/x.so"\n'), /env\.LD_PRELOAD is reserved: names starting with LD_/);
    assert.match(error('[env]\nLD_LIBRARY_PATH = "/tmp"\n'), /env\.LD_LIBRARY_PATH is reserved/);
  });

  it("refuses [env] entries that are not a variable name with a string value, or too many or too large", () => {
    assert.match(error('[env]\n"1ABC" = "x"\n'), /env\.1ABC is not an environment variable name/);
    assert.match(error('[env]\n"A-B" = "x"\n'), /env\.A-B is not an environment variable name/);
    assert.match(error('[env]\n"A=B" = "x"\n'), /env\."A=B" is not an environment variable name/);
    assert.match(error("[env]\nWORKERS = 4\n"), /env\.WORKERS must be a string/);
    assert.match(error("[env]\nDEBUG = true\n"), /env\.DEBUG must be a string/);
    assert.match(error('[env]\nNUL = "a\\u0000b"\n'), /env\.NUL holds a NUL character/);
    assert.match(error('env = "x"\n'), /env must be a table/);
    const many = Array.from({ length: 129 }, (_, i) => `V${i} = "x"`).join("\n");
    assert.match(error(`[env]\n${many}\n`), /env has 129 variables; at most 128/);
    assert.match(error(`[env]\nBIG = "${"x".repeat(33 * 1024)}"\n`), /env\.BIG is longer than 32 KiB/);
    const large = Array.from({ length: 3 }, (_, i) => `V${i} = "${"x".repeat(30 * 1024)}"`).join("\n");
    assert.match(error(`[env]\n${large}\n`), /env holds \d+ bytes of names and values; at most 65536/);
  });

  it("refuses a [network] egress that is not a boolean, or another [network] key", () => {
    assert.match(error('[network]\negress = "no"\n'), /network\.egress must be true or false/);
    assert.match(error("[network]\ningress = true\n"), /unknown key network\.ingress/);
  });

  it("refuses a pip entry that is an option, naming it", () => {
    assert.equal(
      error('[dependencies.pip]\n"--index-url=http://10.0.0.1/" = "*"\n'),
      'dependencies.pip."--index-url=http://10.0.0.1/" is not a package name: use a PEP 508 project name (letters, digits, and . _ - inside, optional [extras]); pip options, paths and URLs are refused unless the operator sets RUNPLANE_PIP_ALLOW_UNPINNED',
    );
    assert.match(error('[dependencies.pip]\n"-r" = "/etc/passwd"\n'), /dependencies\.pip\."-r" is not a package name/);
    assert.match(error('[dependencies.pip]\n"-e" = "."\n'), /dependencies\.pip\."-e" is not a package name/);
  });

  it("refuses a pip entry that is a URL, a path, a marker, an option after the name or a second line", () => {
    assert.match(
      error('[dependencies.pip]\nevil = "@ https://example.com/evil.whl"\n'),
      /dependencies\.pip\.evil has version "@ https:\/\/example\.com\/evil\.whl", which is not a version specifier/,
    );
    assert.match(
      error('[dependencies.pip]\n"https://example.com/evil.whl" = "*"\n'),
      /dependencies\.pip\."https:\/\/example\.com\/evil\.whl" is not a package name/,
    );
    assert.match(error('[dependencies.pip]\n"./vendor/pkg" = "*"\n'), /"\.\/vendor\/pkg" is not a package name/);
    assert.match(error('[dependencies.pip]\n"/abs/pkg" = "*"\n'), /"\/abs\/pkg" is not a package name/);
    assert.match(
      error("[dependencies.pip]\nrequests = \">=2; python_version > '3'\"\n"),
      /dependencies\.pip\.requests has version .* which is not a version specifier/,
    );
    assert.match(
      error('[dependencies.pip]\nrequests = "==2.32 --config-settings=x=y"\n'),
      /dependencies\.pip\.requests has version/,
    );
    assert.match(
      error('[dependencies.pip]\nrequests = "2.32\\n--index-url=http://10.0.0.1/"\n'),
      /dependencies\.pip\.requests holds a line break/,
    );
    assert.match(error('[dependencies.pip]\n"a b" = "*"\n'), /dependencies\.pip\."a b" is not a package name/);
    assert.match(error('[dependencies.pip]\nrequests = "-1"\n'), /dependencies\.pip\.requests has version "-1"/);
  });

  it("accepts pip names with version specifiers", () => {
    const config = parseAppConfig(
      `[dependencies.pip]
requests = ">=2,<3"
numpy = "~=1.4"
torch = "==2.1.*"
"uvicorn[standard]" = ">= 0.30, != 0.31.1"
rich = "*"
attrs = "23.2"
"zope.interface" = "6.1.post1"
Flask = "===3.0.0"
pkg_a = "1.0+cpu"
pre-rel = ">=1.0rc1"
`,
      "/a",
    );
    assert.equal(config.dependencies.pip.requests, ">=2,<3");
    assert.equal(Object.keys(config.dependencies.pip).length, 10);
  });

  it("lets the operator allow pip options, paths and URLs, but never a second line", () => {
    const config = parseAppConfig(
      '[dependencies.pip]\n"--index-url=http://10.0.0.1/" = "*"\nevil = "@ https://example.com/e.whl"\n',
      "/a",
      { pipAllowUnpinned: true },
    );
    assert.deepEqual(Object.keys(config.dependencies.pip), ["--index-url=http://10.0.0.1/", "evil"]);
    assert.match(
      error('[dependencies.pip]\nrequests = "2\\n--index-url=http://10.0.0.1/"\n', { pipAllowUnpinned: true }),
      /dependencies\.pip\.requests holds a line break/,
    );
  });

  it("refuses apt and conda entries that are not package names or versions, naming them", () => {
    assert.match(
      error('[dependencies.apt]\n"-oAPT::Update::Pre-Invoke::=sh" = "*"\n'),
      /dependencies\.apt\."-oAPT::Update::Pre-Invoke::=sh" is not a Debian package name/,
    );
    assert.match(error('[dependencies.apt]\nCurl = "*"\n'), /dependencies\.apt\.Curl is not a Debian package name/);
    assert.match(error('[dependencies.apt]\nc = "*"\n'), /dependencies\.apt\.c is not a Debian package name/);
    assert.match(
      error('[dependencies.apt]\ncurl = "1.0 --force-yes"\n'),
      /dependencies\.apt\.curl has version "1\.0 --force-yes", which is not a Debian version/,
    );
    assert.match(
      error('[dependencies.conda]\n"--channel" = "*"\n'),
      /dependencies\.conda\."--channel" is not a conda package name/,
    );
    assert.match(
      error('[dependencies.conda]\nnumpy = "1.26; rm -rf /"\n'),
      /dependencies\.conda\.numpy has version "1\.26; rm -rf \/", which is not a conda version spec/,
    );
    const config = parseAppConfig(
      '[dependencies.apt]\ncurl = "*"\ngit = "1:2.39.5-0+deb12u1"\n"libstdc++6" = "12.2.0-14"\n'
        + '[dependencies.conda]\nnumpy = ">=1.26,<2"\n_libgcc_mutex = "0.1"\ncudatoolkit = "11.8.*"\n',
      "/a",
    );
    assert.equal(config.dependencies.apt.git, "1:2.39.5-0+deb12u1");
    assert.equal(config.dependencies.conda.numpy, ">=1.26,<2");
  });

  it("reads [hardware] with its documented defaults: 1 core, 2 GiB, no GPU", () => {
    assert.deepEqual(parseAppConfig("", "/a").hardware, { cpu: 1, memoryBytes: 2 * 1024 ** 3, gpuCount: 0 });
    assert.deepEqual(
      parseAppConfig('[hardware]\ncpu = 0.5\nmemory = 0.25\ngpu_count = 2\ncompute = "NVIDIA A100-SXM4-80GB"\n', "/a")
        .hardware,
      { cpu: 0.5, memoryBytes: 256 * 1024 ** 2, gpuCount: 2, compute: "NVIDIA A100-SXM4-80GB" },
    );
    assert.deepEqual(parseAppConfig('[hardware]\ncpu = 4\nmemory = 16\ncompute = "cpu"\n', "/a").hardware, {
      cpu: 4,
      memoryBytes: 16 * 1024 ** 3,
      gpuCount: 0,
      compute: "CPU",
    });
  });

  it("refuses [hardware] values out of range or of the wrong type, naming the key", () => {
    assert.match(error("[hardware]\ncpu = 0\n"), /hardware\.cpu must be a number of cores from 0\.05 to 256, got 0/);
    assert.match(error("[hardware]\ncpu = -1\n"), /hardware\.cpu must be/);
    assert.match(error('[hardware]\ncpu = "2"\n'), /hardware\.cpu must be a number of cores/);
    assert.match(error("[hardware]\ncpu = 1000\n"), /hardware\.cpu must be/);
    assert.match(error("[hardware]\nmemory = 0.01\n"), /hardware\.memory must be a number of GiB from 0\.0625 to 1024/);
    assert.match(error('[hardware]\nmemory = "2Gi"\n'), /hardware\.memory must be a number of GiB/);
    assert.match(error("[hardware]\nmemory = nan\n"), /hardware\.memory must be/);
    assert.match(error("[hardware]\ngpu_count = 1.5\n"), /hardware\.gpu_count must be a whole number from 0 to 16/);
    assert.match(error("[hardware]\ngpu_count = -1\n"), /hardware\.gpu_count/);
    assert.match(error('[hardware]\ncompute = ""\n'), /hardware\.compute must be a non-empty string/);
    assert.match(error('[hardware]\ncompute = "A10; rm -rf /"\n'), /hardware\.compute must be "CPU" or a GPU model/);
    assert.match(error("[hardware]\ngpu = 1\n"), /unknown key hardware\.gpu/);
    assert.match(error("hardware = 2\n"), /hardware must be a table/);
  });

  it("refuses a [hardware] compute that contradicts gpu_count", () => {
    assert.match(error('[hardware]\ncompute = "CPU"\ngpu_count = 1\n'), /compute = "CPU" asks for no GPU/);
    assert.match(error('[hardware]\ncompute = "AMPERE_A10"\n'), /hardware\.compute names a GPU model .*gpu_count is 0/);
  });

  it("reports invalid TOML", () => {
    assert.match(error("[scaling\n"), /not valid TOML/);
  });
});
