import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
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
function typecheckConsumer(dir: string, host: CachingCompilerHost, check: string): { ok: boolean; output: string } {
  writeFileSync(join(dir, "check.ts"), check);
  const config = ts.parseJsonConfigFileContent(CONSUMER_TSCONFIG, ts.sys, dir);
  const program = ts.createProgram({
    rootNames: config.fileNames,
    options: config.options,
    host: host.withOverrides(new Map([[join(dir, "check.ts"), check]])),
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

/**
 * Packs the project as npm would publish it, installs the tarball into a fresh project without npm
 * resolving anything (test/_helpers/packed_package.ts) and uses `runplane/client` from plain Node and from
 * a strict TypeScript project.
 */
describe("the packed client", { timeout: 240_000 }, () => {
  let dir: string;
  let packed: PackedPackage;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-pack-"));
    await writeFile(
      join(dir, "package.json"),
      JSON.stringify({ name: "consumer", version: "1.0.0", type: "module", private: true }),
    );
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
    assert.ok(packed.dependencies.includes("openapi-fetch"), "openapi-fetch is a runtime dependency");
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
    const failed = typecheckConsumer(
      dir,
      host,
      `
      import { createRunplaneClient } from "runplane/client";
      export const digest: number = (await createRunplaneClient({ apiUrl: "x" }).baseImageHash("p/a", {})).digest;
    `,
    );
    assert.equal(failed.ok, false, "a type error in the consumer must fail tsc: the types are not any");
    assert.match(failed.output, /Type 'string' is not assignable to type 'number'/);
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
