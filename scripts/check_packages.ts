/**
 * `npm run check:packages` (a step of `npm run check`): both packages install by themselves from their
 * tarballs, as a user installs them. `npm pack` of the root (`runplane`) and of `packages/client`
 * (`@runplane/client`), then each alone into an empty folder with `npm install <tarball>`, its dependencies
 * from the registry (so a dependency no registry has fails here); then `@runplane/client` is loaded with
 * `require` and with `import`, and the root package's `runplane/client` export and bin answer.
 */
import { execFile } from "node:child_process";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { ROOT } from "./generate.ts";

const run = promisify(execFile);

/** Packs the package at `source` into `dir` and returns the tarball's path. */
async function pack(source: string, dir: string): Promise<string> {
  const before = new Set(await readdir(dir));
  await run("npm", ["pack", "--pack-destination", dir], { cwd: source, maxBuffer: 64 * 1024 * 1024 });
  const name = (await readdir(dir)).find((file) => file.endsWith(".tgz") && !before.has(file));
  if (!name) throw new Error(`npm pack of ${source} wrote no tarball`);
  return join(dir, name);
}

/** Installs `tarball` alone into a new folder under `dir`, from the registry; returns the folder. */
async function installAlone(tarball: string, dir: string, name: string): Promise<string> {
  const project = join(dir, name);
  await run("mkdir", ["-p", project]);
  await writeFile(join(project, "package.json"), `{ "name": "consumer-${name}", "private": true }\n`);
  await run("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", tarball], {
    cwd: project,
    maxBuffer: 64 * 1024 * 1024,
  });
  return project;
}

/** Runs `node args` in `cwd` and returns its stdout, trimmed. */
async function node(cwd: string, args: string[]): Promise<string> {
  return (await run(process.execPath, args, { cwd })).stdout.trim();
}

/** Checks both packages; throws with what failed. */
export async function checkPackages(): Promise<string[]> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-packages-"));
  try {
    const clientTarball = await pack(join(ROOT, "packages", "client"), dir);
    const rootTarball = await pack(ROOT, dir);
    const [client, server] = await Promise.all([
      installAlone(clientTarball, dir, "client"),
      installAlone(rootTarball, dir, "server"),
    ]);
    const seen = [
      `require: ${await node(client, ["-e", "console.log(typeof require('@runplane/client').createRunplaneClient)"])}`,
      `import: ${await node(client, [
        "--input-type=module",
        "-e",
        "import { createRunplaneClient } from '@runplane/client'; console.log(typeof createRunplaneClient)",
      ])}`,
      `runplane/client: ${await node(server, [
        "--input-type=module",
        "-e",
        "import { createRunplaneClient } from 'runplane/client'; console.log(typeof createRunplaneClient)",
      ])}`,
      `runplane --help: ${
        (await node(server, [join(server, "node_modules", ".bin", "runplane"), "--help"])).split("\n")[0]
      }`,
    ];
    const expected = [
      "require: function",
      "import: function",
      "runplane/client: function",
      "runplane --help: Usage: runplane <command> [flags]",
    ];
    const wrong = seen.filter((line, index) => line !== expected[index]);
    if (wrong.length) throw new Error(`unexpected: ${wrong.join("; ")}`);
    return seen;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

if (process.argv[1]?.endsWith("check_packages.ts")) {
  const started = performance.now();
  for (const line of await checkPackages()) process.stdout.write(`  ${line}\n`);
  process.stdout.write(`check: both packages install alone (${((performance.now() - started) / 1000).toFixed(1)} s)\n`);
}
