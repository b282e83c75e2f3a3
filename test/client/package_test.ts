import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import { mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { type AddressInfo, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import ts from "typescript";
import { ROOT } from "../../scripts/generate.ts";
import { installPackedPackage, type PackedPackage } from "../_helpers/packed_package.ts";
import { type CachingCompilerHost, cachingCompilerHost, formatDiagnostics } from "../_helpers/typescript.ts";

const run = promisify(execFile);

const CONSUMER_TSCONFIG = {
  compilerOptions: {
    module: "nodenext",
    moduleResolution: "nodenext",
    target: "es2022",
    strict: true,
    noEmit: true,
    lib: ["es2023", "dom"],
    types: [],
  },
  files: ["check.ts"],
};

/**
 * Type-checks the consumer project in `dir` as `tsc -p` would with `CONSUMER_TSCONFIG`, with `check.ts`
 * as given, in this process (test/_helpers/typescript.ts). `check.ts` is written to the folder and also
 * handed to the compiler, whose host keeps the first text it read of every path.
 */
function typecheckConsumer(
  dir: string,
  host: CachingCompilerHost,
  check: string,
  options: { file?: string } = {},
): { ok: boolean; output: string } {
  const file = options.file ?? "check.ts";
  writeFileSync(join(dir, file), check);
  const config = ts.parseJsonConfigFileContent({ ...CONSUMER_TSCONFIG, files: [file] }, ts.sys, dir);
  const program = ts.createProgram({
    rootNames: config.fileNames,
    options: config.options,
    host: host.withOverrides(new Map([[join(dir, file), check]])),
  });
  // Every file but TypeScript's own standard library: checking lib.dom.d.ts and its kin took most of the
  // time, and finds nothing about this package.
  const diagnostics = [
    ...config.errors,
    ...program.getOptionsDiagnostics(),
    ...program.getGlobalDiagnostics(),
    ...program.getSourceFiles().filter((file) => !program.isSourceFileDefaultLibrary(file)).flatMap((file) => [
      ...program.getSyntacticDiagnostics(file),
      ...program.getSemanticDiagnostics(file),
    ]),
  ];
  return { ok: diagnostics.length === 0, output: formatDiagnostics(diagnostics, dir) };
}

/** Fails unless a consumer that misuses the client from `specifier` fails to type-check (the types are not any). */
function assertMisuseFails(dir: string, host: CachingCompilerHost, specifier: string): void {
  const failed = typecheckConsumer(
    dir,
    host,
    `
      import { createRunplaneClient } from "${specifier}";
      export const digest: number = (await createRunplaneClient({ apiUrl: "x" }).baseImageHash("p/a", {})).digest;
    `,
  );
  assert.equal(failed.ok, false, "a type error in the consumer must fail tsc: the types are not any");
  assert.match(failed.output, /Type 'string' is not assignable to type 'number'/);
}

/** A new, empty consumer project (an ESM package.json) in a temporary folder. */
async function consumerProject(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await writeFile(
    join(dir, "package.json"),
    JSON.stringify({ name: "consumer", version: "1.0.0", type: "module", private: true }),
  );
  return dir;
}

/**
 * Packs the project as npm would publish it, installs the tarball into a fresh project without npm
 * resolving anything (test/_helpers/packed_package.ts) and uses `runplane/client` from plain Node and from
 * a strict TypeScript project.
 */
describe("the packed client", { timeout: 240_000 }, () => {
  let dir: string;
  let packed: PackedPackage;
  before(async () => {
    dir = await consumerProject("runplane-pack-");
    packed = await installPackedPackage(dir);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("holds the built client, its declarations, the CLI and the server, and no tests", () => {
    for (const file of ["package.json", "dist/client/mod.js", "dist/client/mod.d.ts", "client/runplane.mjs"]) {
      assert.ok(packed.files.includes(file), `${file} is missing from the tarball`);
    }
    assert.ok(packed.files.some((file) => file.startsWith("server/")), "the server is missing from the tarball");
    const stray = packed.files.filter((file) => /^(test|node_modules|\.runplane|scripts)\//.test(file));
    assert.deepEqual(stray, []);
    // It imports no @runplane/client (its own copy of the client is runplane/client), and no registry has
    // that package: a dependency on it made the tarball uninstallable by itself.
    assert.ok(!packed.dependencies.includes("@runplane/client"), "@runplane/client is no dependency");
    assert.ok(packed.files.includes("LICENSE"), "the tarball carries the license");
  });

  it("imports in plain Node and verifies a signature computed with node:crypto", async () => {
    const script = `
      import { createHmac } from "node:crypto";
      import { createRunplaneClient, resolveAppRef, verifyWebhook } from "runplane/client";
      const body = '{"ok":true}';
      const timestamp = Math.floor(Date.now() / 1000);
      const runId = "run_0123456789abcdefghijklmnop";
      const signature = "v1," + createHmac("sha256", "s3cret").update(runId + "." + timestamp + "." + body).digest("hex");
      const headers = { "x-request-id": runId, "x-runplane-webhook-timestamp": String(timestamp), "x-runplane-webhook-signature": signature };
      const outcome = await verifyWebhook({ secret: "s3cret", headers, body });
      const client = createRunplaneClient({ apiUrl: "http://127.0.0.1:9" });
      console.log(JSON.stringify({ valid: outcome.valid, ref: resolveAppRef("p/a"), methods: typeof client.stream }));
    `;
    const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script], { cwd: dir });
    assert.deepEqual(JSON.parse(stdout), {
      valid: true,
      ref: { project: "p", app: "a", function: "run" },
      methods: "function",
    });
  });

  it("ships declarations that type-check in a strict project, and catch misuse", async () => {
    await writeFile(join(dir, "tsconfig.json"), JSON.stringify(CONSUMER_TSCONFIG));
    const host = cachingCompilerHost(ts.parseJsonConfigFileContent(CONSUMER_TSCONFIG, ts.sys, dir).options);
    const passed = typecheckConsumer(
      dir,
      host,
      `
      import { createRunplaneClient, RunplaneError, type Run } from "runplane/client";
      const client = createRunplaneClient({ baseUrl: "http://127.0.0.1:9", token: "t" });
      export const waited: Promise<Run> = client.waitForRun("run_0123456789abcdefghijklmnop", { timeoutMs: 1000 });
      export async function status(): Promise<Run["status"]> {
        try {
          return (await client.getRun("p/a", "run_0123456789abcdefghijklmnop")).status;
        } catch (error) {
          if (error instanceof RunplaneError) return error.problem.status === 404 ? "failure" : "queued";
          throw error;
        }
      }
    `,
    );
    assert.equal(passed.ok, true, passed.output);
    assertMisuseFails(dir, host, "runplane/client");
  });
  it("runs the installed runplane bin from the built dist/, without tsx", async () => {
    // Without tsx in the consumer, a bin that still loaded the TypeScript sources would fail to start.
    const tsx = join(dir, "node_modules", "tsx");
    await rm(tsx);
    try {
      const bin = join(packed.packageDir, "client", "runplane.mjs");
      const help = await run(process.execPath, [bin, "serve", "--help"], { cwd: dir });
      assert.match(help.stdout, /^Usage: runplane serve \[flags\]/);
      const closed = createServer().listen(0, "127.0.0.1");
      await once(closed, "listening");
      const { port } = closed.address() as AddressInfo;
      closed.close();
      const failed = await run(process.execPath, [bin, "run", "p/a", "--base-url", `http://127.0.0.1:${port}`], {
        cwd: dir,
      }).then(() => undefined, (error: { code: number; stderr: string }) => error);
      assert.equal(failed?.code, 1);
      assert.match(failed.stderr, /^runplane run: Cannot reach the server \(ECONNREFUSED\)/);
    } finally {
      await symlink(join(ROOT, "node_modules", "tsx"), tsx, "dir");
    }
  });
});

/** The runtime dependencies `name` brings, transitively, as the checkout's `node_modules` holds them. */
async function dependencyClosure(names: string[]): Promise<Set<string>> {
  const seen = new Set<string>();
  const queue = [...names];
  while (queue.length) {
    const name = queue.pop()!;
    if (seen.has(name)) continue;
    seen.add(name);
    const manifest = JSON.parse(await readFile(join(ROOT, "node_modules", name, "package.json"), "utf8")) as {
      dependencies?: Record<string, string>;
    };
    queue.push(...Object.keys(manifest.dependencies ?? {}));
  }
  return seen;
}

/**
 * `@runplane/client` (packages/client) packed and installed alone: the typed client without the server,
 * for services that only call Runplane.
 */
describe("the @runplane/client package", { timeout: 240_000 }, () => {
  let dir: string;
  let packed: PackedPackage;
  before(async () => {
    dir = await consumerProject("runplane-client-pack-");
    packed = await installPackedPackage(dir, { source: join(ROOT, "packages", "client") });
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("holds the built client, its declarations and the license, and nothing of the server", () => {
    for (const file of ["package.json", "LICENSE", "dist/client/mod.js", "dist/client/mod.d.ts"]) {
      assert.ok(packed.files.includes(file), `${file} is missing from the tarball`);
    }
    assert.ok(packed.files.includes("dist/generated/api.d.ts"), "the API types its declarations import");
    const stray = packed.files.filter((file) =>
      !/^(dist\/(cjs\/)?(client|generated)\/|dist\/cjs\/package\.json$|package\.json$|LICENSE$|README\.md$)/.test(file)
    );
    assert.deepEqual(stray, []);
  });

  it("depends on openapi-fetch and eventsource-parser only, which bring none of the server's dependencies", async () => {
    assert.deepEqual(packed.dependencies, ["eventsource-parser", "openapi-fetch"]);
    const root = JSON.parse(await readFile(join(ROOT, "package.json"), "utf8")) as {
      dependencies: Record<string, string>;
    };
    const closure = await dependencyClosure(packed.dependencies);
    const server = Object.keys(root.dependencies).filter((name) => !closure.has(name) && name !== "@runplane/client");
    assert.ok(server.includes("koa") && server.includes("better-sqlite3"), "the server's own dependencies");
    assert.deepEqual([...closure].filter((name) => server.includes(name)), []);
  });

  it("imports in plain Node and type-checks in a strict project", async () => {
    const script = `
      import { createRunplaneClient, resolveAppRef, verifyWebhook } from "@runplane/client";
      const outcome = await verifyWebhook({ secret: "s", headers: {}, body: "{}" });
      const client = createRunplaneClient({ apiUrl: "http://127.0.0.1:9" });
      console.log(JSON.stringify({ valid: outcome.valid, ref: resolveAppRef("p/a"), stream: typeof client.stream }));
    `;
    const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script], { cwd: dir });
    assert.deepEqual(JSON.parse(stdout), {
      valid: false,
      ref: { project: "p", app: "a", function: "run" },
      stream: "function",
    });
    await writeFile(join(dir, "tsconfig.json"), JSON.stringify(CONSUMER_TSCONFIG));
    const host = cachingCompilerHost(ts.parseJsonConfigFileContent(CONSUMER_TSCONFIG, ts.sys, dir).options);
    const passed = typecheckConsumer(
      dir,
      host,
      `
      import { createRunplaneClient, type Run } from "@runplane/client";
      const client = createRunplaneClient({ baseUrl: "http://127.0.0.1:9", token: "t" });
      export const waited: Promise<Run> = client.waitForRun("run_0123456789abcdefghijklmnop", { timeoutMs: 1000 });
    `,
    );
    assert.equal(passed.ok, true, passed.output);
    assertMisuseFails(dir, host, "@runplane/client");
  });

  it("loads from CommonJS: require() in plain Node, and a CommonJS TypeScript file type-checks (no TS1479)", async () => {
    const script = `
      const { createRunplaneClient, resolveAppRef, RunplaneError } = require("@runplane/client");
      const client = createRunplaneClient({ apiUrl: "http://127.0.0.1:9" });
      console.log(JSON.stringify({ ref: resolveAppRef("p/a"), stream: typeof client.stream, error: typeof RunplaneError }));
    `;
    const { stdout } = await run(process.execPath, ["-e", script], { cwd: dir });
    assert.deepEqual(JSON.parse(stdout), {
      ref: { project: "p", app: "a", function: "run" },
      stream: "function",
      error: "function",
    });
    const host = cachingCompilerHost(ts.parseJsonConfigFileContent(CONSUMER_TSCONFIG, ts.sys, dir).options);
    const cjs = `
      import { createRunplaneClient, type Run } from "@runplane/client";
      const client = createRunplaneClient({ baseUrl: "http://127.0.0.1:9", token: "t" });
      export const waited: Promise<Run> = client.waitForRun("run_0123456789abcdefghijklmnop", { timeoutMs: 1000 });
    `;
    const passed = typecheckConsumer(dir, host, cjs, { file: "check.cts" });
    assert.equal(passed.ok, true, passed.output);
    const misuse = typecheckConsumer(dir, host, `${cjs}\nexport const wrong: number = client.run;\n`, {
      file: "check.cts",
    });
    assert.equal(misuse.ok, false, "the CommonJS declarations are typed, not any");
  });
});
