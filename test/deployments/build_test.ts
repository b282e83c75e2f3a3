import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { lookup } from "node:dns/promises";
import { once } from "node:events";
import { mkdir, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { type AddressInfo, createServer } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { baseImageRequestFromToml } from "../../client/base_image_request.ts";
import { baseImageDigest } from "../../server/builds/mod.ts";
import {
  BuildError,
  type BuildLogLine,
  pipInstallArgs,
  requirementsText,
  runBuild,
} from "../../server/deployments/_build.ts";
import { buildPlan, type BuildPlan } from "../../server/deployments/_build_plan.ts";
import { dependencyLayer } from "../../server/deployments/_dependency_layer.ts";
import { type AppConfigOptions, parseAppConfig } from "../../server/runtime/mod.ts";
import { unjailedSandbox } from "../../server/sandbox/mod.ts";
import { writeWheel } from "../_helpers/wheels.ts";

/** Whether this host resolves PyPI's name (pip's default index). */
const PYPI_RESOLVES = await lookup("pypi.org").then(() => true, () => false);

function planOf(toml: string, options?: AppConfigOptions) {
  return buildPlan(parseAppConfig(toml, "/app", options));
}

describe("runBuild", () => {
  let root: string;
  let wheels: string;
  let venvsDir: string;

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-build-"));
    wheels = join(root, "wheels");
    venvsDir = join(root, "venvs");
    await mkdir(wheels);
    writeWheel(wheels, "rp_testdep", "1.0");
  });
  after(() => rm(root, { recursive: true, force: true }));

  async function build(
    toml: string | BuildPlan,
    options: {
      timeoutMs?: number;
      signal?: AbortSignal;
      pipAllowUnpinned?: boolean;
      /** The operator's pip settings, instead of the test's wheels folder. */
      pip?: { pipIndexUrl?: string; pipFindLinks?: string };
    } = {},
  ) {
    const dir = await mkdtemp(join(root, "app-"));
    const lines: BuildLogLine[] = [];
    const plan = typeof toml === "string" ? planOf(toml, { pipAllowUnpinned: options.pipAllowUnpinned }) : toml;
    const layer = dependencyLayer(plan, {
      venvsDir,
      python: "python3",
      deploymentDir: dir,
      projectId: "p-build",
      bundleDigest: "sha256:bundle",
    });
    const run = runBuild(dir, plan, {
      layer,
      python: "python3",
      ...(options.pip ?? { pipFindLinks: wheels }),
      pipAllowUnpinned: options.pipAllowUnpinned,
      timeoutMs: options.timeoutMs ?? 120_000,
      log: (line) => lines.push(line),
      signal: options.signal,
      sandbox: unjailedSandbox(),
      projectId: "p-build",
      egress: false,
    });
    const outcome = await run.then(
      (result) => ({ result, error: undefined as unknown }),
      (error: unknown) => ({ result: undefined, error }),
    );
    return { ...outcome, dir, lines, text: lines.map((l) => l.text).join("\n") };
  }

  it("installs a pip dependency from the operator's wheels, then reuses the virtualenv of the same digest", async () => {
    const toml =
      `[dependencies.pip]\nrp_testdep = "1.0"\n[build]\nshell_commands = ["python -c 'import rp_testdep; print(rp_testdep.VALUE)'"]\n`;
    const first = await build(toml);
    assert.equal(first.result?.venv, "new", first.text);
    assert.match(first.text, /==> pip: new virtualenv/);
    assert.ok(
      first.lines.some((l) => l.stream === "stdout" && l.text === "1.0"),
      "the shell step sees the venv first on PATH",
    );
    const imported = execFileSync(first.result!.python!, ["-c", "import rp_testdep; print(rp_testdep.VALUE)"], {
      encoding: "utf8",
    });
    assert.equal(imported.trim(), "1.0");
    const second = await build(toml);
    assert.equal(second.result?.venv, "cached");
    assert.equal(second.result?.python, first.result?.python);
    assert.match(second.text, /==> pip: cached virtualenv sha256:/);
    assert.doesNotMatch(second.text, /Processing|Installing|Successfully/, "pip did not run");
    assert.deepEqual(
      (await readdir(venvsDir)).filter((n) => !n.endsWith(".lock")).map((n) => n.replace(/\.requirements\.txt$/, "")),
      [first.result!.python!.split("/").at(-3)!, first.result!.python!.split("/").at(-3)!],
      "one virtualenv, its requirements file beside it",
    );
  });

  it("runs the steps in the platform's order", async () => {
    const { result, text } = await build(
      `[build]\npre_build_commands = ["echo pre"]\nshell_commands = ["echo shell"]\n[dependencies.apt]\ncoreutils = "*"\n`,
    );
    assert.equal(result?.venv, "none", text);
    const order = ["pre-build", "echo pre", "==> apt", "==> code", "==> shell", "echo shell"].map((s) =>
      text.indexOf(s)
    );
    assert.ok(order.every((at, i) => at >= 0 && (i === 0 || at > order[i - 1])), text);
  });

  it("fails naming the cause: a missing wheel, a failing command, a missing apt package", async () => {
    const missing = await build(`[dependencies.pip]\nrp_not_a_wheel = "2.0"\n`);
    assert.ok(missing.error instanceof BuildError);
    assert.equal(missing.error.step, "pip");
    assert.match(missing.text, /No matching distribution found for rp_not_a_wheel|Could not find a version/);
    assert.ok(
      !(await readdir(venvsDir)).some((n) =>
        n === planOf(`[dependencies.pip]\nrp_not_a_wheel = "2.0"\n`).digest.slice(7)
      ),
      "no half-made venv is left",
    );

    const shell = await build(`[build]\nshell_commands = ["echo before", "exit 3"]\n`);
    assert.ok(shell.error instanceof BuildError);
    assert.match(shell.error.message, /shell failed: `exit 3` exited with code 3/);

    const apt = await build(`[dependencies.apt]\ndefinitely-not-a-package-xyz = "*"\n`);
    assert.ok(apt.error instanceof BuildError);
    assert.match(apt.error.message, /definitely-not-a-package-xyz is not installed on this host/);
  });

  it("gives pip one quick retry and a 5 s timeout only when the operator names no index or wheels", () => {
    const base = ["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-r", "/r.txt"];
    assert.deepEqual(pipInstallArgs("/r.txt", {}), [...base, "--retries", "1", "--timeout", "5"]);
    assert.deepEqual(pipInstallArgs("/r.txt", { pipIndexUrl: "https://mirror/simple" }), [
      ...base,
      "--index-url",
      "https://mirror/simple",
    ]);
    assert.deepEqual(pipInstallArgs("/r.txt", { pipFindLinks: "/wheels" }), [
      ...base,
      "--no-index",
      "--find-links",
      "/wheels",
    ]);
  });

  it("names RUNPLANE_PIP_INDEX_URL and RUNPLANE_PIP_FIND_LINKS when pip cannot reach its index", async () => {
    const closed = createServer().listen(0, "127.0.0.1");
    await once(closed, "listening");
    const { port } = closed.address() as AddressInfo;
    await new Promise((resolve) => closed.close(resolve));
    const { error, text } = await build(`[dependencies.pip]\nrp_unreachable = "1.0"\n`, {
      pip: { pipIndexUrl: `http://127.0.0.1:${port}/simple` },
    });
    assert.ok(error instanceof BuildError, text);
    assert.equal(error.step, "pip");
    assert.match(
      error.message,
      /pip failed: .* could not reach the package index: .*RUNPLANE_PIP_INDEX_URL.*RUNPLANE_PIP_FIND_LINKS/,
    );
    // A requirement pip finds no version of, on an index it reaches, is not blamed on the network.
    const missing = await build(`[dependencies.pip]\nrp_not_a_wheel = "3.0"\n`);
    assert.ok(missing.error instanceof BuildError);
    assert.doesNotMatch(missing.error.message, /RUNPLANE_PIP_INDEX_URL/);
  });

  it("fails in seconds, naming both settings, with no index configured on a host that cannot reach PyPI", {
    skip: PYPI_RESOLVES && "this host resolves pypi.org: the unreachable default index cannot be had here",
  }, async (t) => {
    const started = Date.now();
    const { error, text } = await build(`[dependencies.pip]\nrp_offline = "1.0"\n`, { pip: {} });
    assert.ok(error instanceof BuildError, text);
    assert.match(error.message, /could not reach the package index: .*RUNPLANE_PIP_INDEX_URL.*RUNPLANE_PIP_FIND_LINKS/);
    // pip's default is five retries with a growing backoff (7.5 s of sleeping alone, ~28 s seen): one is
    // left, with no backoff (its 5 s socket timeout: pipInstallArgs above). The seconds are the host's
    // (a resolver that never answers, a loaded machine making the virtualenv: CI once took 67 s), so they
    // are printed, not bounded.
    assert.match(text, /Retry\(total=0/, "pip retried once");
    assert.doesNotMatch(text, /Retry\(total=[1-9]/, "pip retried more than once");
    t.diagnostic(`the build failed after ${(Date.now() - started) / 1000} s`);
  });

  it("keeps the server's RUNPLANE_ settings from build commands", async () => {
    process.env.RUNPLANE_TEST_SECRET = "hidden";
    try {
      const { text } = await build(`[build]\nshell_commands = ["echo secret=[$RUNPLANE_TEST_SECRET]"]\n`);
      assert.match(text, /secret=\[\]/);
    } finally {
      delete process.env.RUNPLANE_TEST_SECRET;
    }
  });

  it("kills a step past the build timeout, and a cancelled build, with its process group", async () => {
    const started = Date.now();
    const slow = await build(`[build]\npre_build_commands = ["sleep 31 & sleep 30"]\n`, { timeoutMs: 500 });
    assert.ok(slow.error instanceof BuildError);
    assert.match(slow.error.message, /ran past the build timeout/);
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 300);
    const cancelled = await build(`[build]\nshell_commands = ["sleep 30"]\n`, { signal: controller.signal });
    assert.ok(cancelled.error instanceof BuildError);
    assert.match(cancelled.error.message, /cancelled/);
    assert.ok(Date.now() - started < 20_000, "neither waited for sleep 30");
    // The background `sleep 31` was in the step's process group: it went down with it.
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.throws(() => execFileSync("pgrep", ["-fx", "sleep 31"]), "no sleep 31 is left");
  });

  it("never writes an option line into the requirements file, even from a plan that skipped the config check", async () => {
    for (
      const line of ["--index-url=http://127.0.0.1:9/", " -r /etc/hostname", "rp_testdep==1.0 --config-settings=a=b"]
    ) {
      const plan = { ...planOf(""), digest: `sha256:${"e".repeat(64)}`, pipRequirements: [line] };
      const { error, text } = await build(plan);
      assert.ok(error instanceof BuildError, text);
      assert.equal(error.step, "pip");
      assert.equal(error.message.split(" is a pip option")[0], `pip refused: ${JSON.stringify(line)}`);
      assert.doesNotMatch(text, /==> pip: new virtualenv/, "pip did not start");
      assert.ok(!(await readdir(venvsDir)).includes("e".repeat(64)), "no virtualenv was made");
    }
    const twoLines = { ...planOf(""), pipRequirements: ["rp_testdep==1.0\n--index-url=http://127.0.0.1:9/"] };
    const { error } = await build(twoLines, { pipAllowUnpinned: true });
    assert.ok(error instanceof BuildError);
    assert.match(error.message, /spans lines; one entry is one requirement/);
  });

  it("writes one requirement per line, and option lines only when the operator allows them", async () => {
    assert.equal(requirementsText(["requests>=2,<3", "rp_testdep==1.0"]), "requests>=2,<3\nrp_testdep==1.0\n");
    assert.throws(() => requirementsText(["rp_testdep==1.0 \\"]), /is a pip option/);
    assert.equal(requirementsText(["--pre"], { allowOptions: true }), "--pre\n");
    assert.throws(() => requirementsText(["a\rb"], { allowOptions: true }), /spans lines/);
    const { result, text } = await build(`[dependencies.pip]\n"--pre" = "*"\nrp_testdep = ">=1,<2"\n`, {
      pipAllowUnpinned: true,
    });
    assert.equal(result?.venv, "new", text);
    const written = await readFile(`${join(result!.python!, "..", "..")}.requirements.txt`, "utf8");
    assert.equal(written, "--pre\nrp_testdep>=1,<2\n");
  });

  it("computes the digest createBaseImageHash answers for the same runplane.toml", () => {
    const toml = `[dependencies.pip]\nRequests = ">=2.0"\nrp_testdep = "1.0"\n[dependencies.apt]\ncurl = "*"\n`
      + `[build]\nbase_image = "python:3.12-slim"\nshell_commands = ["echo hi"]\npre_build_commands = ["true"]\n`;
    assert.equal(planOf(toml).digest, baseImageDigest(baseImageRequestFromToml(toml)));
    assert.equal(planOf("").digest, baseImageDigest(baseImageRequestFromToml("")));
  });
});
