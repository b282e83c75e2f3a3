import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";

const run = promisify(execFile);
const ROOT = join(import.meta.dirname, "..", "..");
const TSC = createRequire(import.meta.url).resolve("typescript/bin/tsc");

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
 * Packs the project as npm would publish it, installs the tarball into a fresh project from the npm
 * cache (offline) and uses `runplane/client` from plain Node and from a strict TypeScript project.
 */
describe("the packed client", { timeout: 240_000 }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-pack-"));
    // `npm pack` runs `prepack`, which builds dist/.
    await run("npm", ["pack", "--pack-destination", dir], { cwd: ROOT });
    const tarball = (await readdir(dir)).find((f) => f.endsWith(".tgz"));
    assert.ok(tarball, "npm pack wrote no tarball");
    await writeFile(
      join(dir, "package.json"),
      JSON.stringify({ name: "consumer", version: "1.0.0", type: "module", private: true }),
    );
    await run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", `./${tarball}`], {
      cwd: dir,
    });
  });
  after(() => rm(dir, { recursive: true, force: true }));

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
    await writeFile(
      join(dir, "check.ts"),
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
    await run(process.execPath, [TSC, "-p", dir], { cwd: dir });
    await writeFile(
      join(dir, "check.ts"),
      `
      import { createRunplaneClient } from "runplane/client";
      export const digest: number = (await createRunplaneClient({ apiUrl: "x" }).baseImageHash("p/a", {})).digest;
    `,
    );
    const failed = await run(process.execPath, [TSC, "-p", dir], { cwd: dir }).then(
      () => undefined,
      (error: { stdout: string }) => error,
    );
    assert.ok(failed, "a type error in the consumer must fail tsc: the types are not any");
    assert.match(failed.stdout, /Type 'string' is not assignable to type 'number'/);
  });
});
