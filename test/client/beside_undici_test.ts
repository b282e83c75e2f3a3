/**
 * The client in a process that also loads the npm `undici` package (as the server does, and every test
 * process that imports the server's modules). On Node 20, undici 7 installs its own Agent as the dispatcher
 * of Node's built-in fetch when it is loaded before that fetch was first used, and that Agent refuses a
 * request whose Content-Length was set beside the one fetch sets for a byte body ("invalid content-length
 * header"): `runplane deploy` failed with "Cannot reach the server (UND_ERR_INVALID_ARG)" in such a process.
 * Each case runs in a child process of its own, so the order of loading is the one it names.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { describe, it } from "node:test";
import { promisify } from "node:util";

const CLIENT = JSON.stringify(new URL("../../client/mod.ts", import.meta.url).href);

/** A child that loads undici first, then uploads `size` bytes with the client to a server of its own. */
function uploadScript(options: { progress: boolean }): string {
  return `
    import "undici";
    import { createServer } from "node:http";
    import { createRunplaneClient } from ${CLIENT};
    const seen = [];
    const server = createServer((request, response) => {
      let bytes = 0;
      request.on("data", (chunk) => { bytes += chunk.length; });
      request.on("end", () => {
        seen.push({ length: request.headers["content-length"], chunked: request.headers["transfer-encoding"] ?? null, bytes });
        response.writeHead(201, { "content-type": "application/json" });
        response.end(JSON.stringify({ deployment_id: "d-1" }));
      });
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    const client = createRunplaneClient({ baseUrl: "http://127.0.0.1:" + server.address().port, token: "t" });
    try {
      const body = new Uint8Array(300 * 1024).fill(7);
      const progress = ${options.progress} ? { onUploadProgress() {} } : {};
      await client.createDeployment("p-x/app", body, progress);
      process.stdout.write(JSON.stringify({ seen }));
    } catch (error) {
      process.stdout.write(JSON.stringify({ error: String(error), cause: String(error.cause?.message ?? "") }));
    } finally {
      server.close();
    }
  `;
}

const execute = promisify(execFile);

/** Runs `script` in a child process; its printed outcome. */
async function runChild(script: string): Promise<{ seen?: unknown[]; error?: string; cause?: string }> {
  const { stdout } = await execute(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script]);
  return JSON.parse(stdout);
}

describe("the client in a process that loaded the undici package first", () => {
  it("uploads a deployment's bytes, fetch naming their length once", async () => {
    const outcome = await runChild(uploadScript({ progress: false }));
    assert.deepEqual(outcome, { seen: [{ length: String(300 * 1024), chunked: null, bytes: 300 * 1024 }] });
  });

  it("uploads them as a stream with its Content-Length when progress is reported", async () => {
    const outcome = await runChild(uploadScript({ progress: true }));
    assert.deepEqual(outcome, { seen: [{ length: String(300 * 1024), chunked: null, bytes: 300 * 1024 }] });
  });
});
