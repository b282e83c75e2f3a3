/**
 * The README's ways to have `runplane` on PATH from a checkout, followed as written: `npm link`, and
 * `npx --prefix <checkout> runplane` from any folder. npm runs offline with an empty cache of its own, so
 * neither needs the registry (where no package of that name answers).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { ROOT } from "../_helpers/packed_package.ts";

const run = promisify(execFile);

describe("runplane on PATH from a checkout", { timeout: 180_000 }, () => {
  let scratch: string;
  let elsewhere: string;
  let npmEnv: Record<string, string | undefined>;
  before(async () => {
    scratch = await mkdtemp(join(tmpdir(), "runplane-path-"));
    elsewhere = join(scratch, "elsewhere");
    await mkdir(elsewhere);
    npmEnv = {
      ...Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("RUNPLANE_"))),
      npm_config_cache: join(scratch, "npm-cache"),
      npm_config_offline: "true",
      npm_config_update_notifier: "false",
    };
  });
  after(() => rm(scratch, { recursive: true, force: true }));

  it("npm link in the checkout puts runplane on PATH, running the checkout's code from any folder", async () => {
    const prefix = join(scratch, "global");
    await run("npm", ["link"], { cwd: ROOT, env: { ...npmEnv, npm_config_prefix: prefix } });
    const env = { ...npmEnv, PATH: `${join(prefix, "bin")}${delimiter}${process.env.PATH}` };
    const help = await run("runplane", ["--help"], { cwd: elsewhere, env });
    assert.match(help.stdout, /^Usage: runplane <command> \[flags\]\n/);
    const init = await run("runplane", ["init", "first-app"], { cwd: elsewhere, env });
    assert.match(init.stdout, /^Created app first-app in first-app/);
    assert.deepEqual((await readdir(join(elsewhere, "first-app"))).sort(), ["README.md", "main.py", "runplane.toml"]);
  });

  it("npx --prefix <checkout> runplane runs it from any folder", async () => {
    const help = await run("npx", ["--prefix", ROOT, "runplane", "runs", "--help"], { cwd: elsewhere, env: npmEnv });
    assert.match(help.stdout, /^Usage:\n  runplane runs get /);
  });
});
