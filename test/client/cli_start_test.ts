import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, stat, utimes } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ROOT } from "../../scripts/generate.ts";

const RECORDER = join(import.meta.dirname, "_fixtures", "record_imports.mjs");

/**
 * What a `runplane` start loads (the import-boundary check sees static imports; this sees what the
 * dispatcher imports lazily): the project's modules, relative to the root.
 */
async function modulesLoadedBy(args: string[], file: string): Promise<string[]> {
  await new Promise<void>((resolve) => {
    execFile(
      process.execPath,
      ["--import", "tsx", "--import", RECORDER, join(ROOT, "client", "runplane.mjs"), ...args],
      // The sources, not the checkout's compiled CLI (scripts/build_cli.mjs), so the records name source modules.
      { env: { ...process.env, RECORD_IMPORTS_TO: file, RUNPLANE_CLI_SOURCES: "1" }, timeout: 60_000 },
      () => resolve(),
    );
  });
  const urls = (await readFile(file, "utf8")).split("\n");
  const root = new URL(`file://${ROOT}/`).href;
  return [...new Set(urls.filter((url) => url.startsWith(root)).map((url) => url.slice(root.length)))]
    .filter((path) => !path.startsWith("node_modules/"));
}

/** The project's modules (and the compiled CLI's) that `runplane ...args` loads from the checkout's bin, as URLs. */
async function urlsLoadedByBin(args: string[], file: string): Promise<string[]> {
  await new Promise<void>((resolve) => {
    execFile(
      process.execPath,
      ["--import", RECORDER, join(ROOT, "client", "runplane.mjs"), ...args],
      { env: { ...process.env, RECORD_IMPORTS_TO: file }, timeout: 60_000 },
      () => resolve(),
    );
  });
  return (await readFile(file, "utf8")).split("\n").filter(Boolean);
}

describe("runplane start-up", { timeout: 120_000 }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-start-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("--help loads the dispatcher's tables and no command", async () => {
    const loaded = await modulesLoadedBy(["--help"], join(dir, "help.txt"));
    assert.deepEqual(loaded.sort(), [
      "client/cli.ts",
      "client/cli_command.ts",
      "client/runplane.mjs",
      "server/cli/mod.ts",
    ]);
  });

  it("run loads the client and the run command, nothing of the server beyond the CLI's table", async () => {
    const loaded = await modulesLoadedBy(["run", "p/a", "--base-url", "http://127.0.0.1:9"], join(dir, "run.txt"));
    assert.ok(loaded.includes("client/_commands/run.ts"), loaded.join(", "));
    assert.ok(loaded.includes("client/mod.ts"), loaded.join(", "));
    assert.deepEqual(loaded.filter((path) => path.startsWith("server/")), ["server/cli/mod.ts"]);
    assert.deepEqual(
      loaded.filter((path) =>
        path.startsWith("client/_commands/")
        && !/\/(run|run_input|run_wait|run_format|connection|output|auth_hint)\.ts$/.test(path)
      ),
      [],
    );
  });

  it("a checkout runs its compiled CLI (node_modules/.cache/runplane-cli/), no TypeScript and no tsx", async () => {
    const urls = await urlsLoadedByBin(["run", "p/a", "--base-url", "http://127.0.0.1:9"], join(dir, "compiled.txt"));
    assert.ok(urls.some((url) => url.includes("/node_modules/.cache/runplane-cli/")), urls.join(", "));
    assert.deepEqual(urls.filter((url) => url.endsWith(".ts") || url.includes("/node_modules/tsx/")), []);
  });

  it("a command checks its build without loading the builder; an edit to a source it was built from rebuilds", async () => {
    const builder = (urls: string[]) => urls.some((url) => url.endsWith("/scripts/build_cli.mjs"));
    await urlsLoadedByBin(["--help"], join(dir, "warm.txt")); // builds the CLI if no build is current
    assert.ok(
      !builder(await urlsLoadedByBin(["--help"], join(dir, "current.txt"))),
      "a current build loads no builder",
    );
    // An edit (its change time) to a module of the CLI, as an editor or `git checkout` makes it.
    const source = join(ROOT, "client", "sleep.ts");
    const edited = new Date(Math.ceil((await stat(source)).mtimeMs / 1000) * 1000 + 1000);
    await utimes(source, edited, edited);
    assert.ok(builder(await urlsLoadedByBin(["--help"], join(dir, "edited.txt"))), "an edit made a new build");
    const manifest = JSON.parse(
      await readFile(join(ROOT, "node_modules", ".cache", "runplane-cli", "current.json"), "utf8"),
    );
    assert.equal(manifest.inputs["client/sleep.ts"], (await stat(source)).mtimeMs);
    assert.ok(!builder(await urlsLoadedByBin(["--help"], join(dir, "rebuilt.txt"))), "the new build is current");
  });

  it("serve --help loads the settings, not the server", async () => {
    const loaded = await modulesLoadedBy(["serve", "--help"], join(dir, "serve.txt"));
    assert.ok(loaded.includes("server/config.ts"), loaded.join(", "));
    for (const heavy of ["server/main.ts", "server/mod.ts", "server/cli/serve.ts"]) {
      assert.ok(!loaded.includes(heavy), `${heavy} was loaded for serve --help`);
    }
  });
});
