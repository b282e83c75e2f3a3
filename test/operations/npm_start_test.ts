/**
 * `npm start` as a person or a process manager runs it: npm, its script's shell and the server. A SIGTERM
 * to npm's pid (what `kill <pid>` and most supervisors send) must stop the whole tree and free the port;
 * npm relays the signal to its script's process only, so the script must be the server itself (`exec`).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, it } from "node:test";
import { alive, waitFor } from "../_helpers/apps.ts";
import { createTestClient } from "../_helpers/client.ts";
import { makeServerDirs } from "../_helpers/server_process.ts";
import { SERVER_NODE_FLAGS } from "../../server/node_flags.ts";

const ROOT = join(import.meta.dirname, "..", "..");

/** Every live descendant of `pid` (children of each thread, recursively), from /proc. */
function descendants(pid: number): number[] {
  const found: number[] = [];
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return found;
  }
  for (const task of tasks) {
    let children = "";
    try {
      children = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8");
    } catch {
      continue;
    }
    for (const child of children.split(" ").filter(Boolean).map(Number)) found.push(child, ...descendants(child));
  }
  return found;
}

/** A loopback port that was free a moment ago. */
async function freePort(): Promise<number> {
  const probe = createServer().listen(0, "127.0.0.1");
  await once(probe, "listening");
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** Whether `port` on the loopback can be bound now. */
async function portIsFree(port: number): Promise<boolean> {
  const probe = createServer();
  return await new Promise<boolean>((resolve) => {
    probe.once("error", () => resolve(false));
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(true)));
  });
}

describe("npm start", { timeout: 180_000 }, () => {
  it("stops its whole process tree and frees the port when npm's pid gets SIGTERM", async () => {
    const dirs = await makeServerDirs("runplane-npm-start-");
    const port = await freePort();
    const base = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("RUNPLANE_")));
    const npm = spawn("npm", ["start"], {
      cwd: ROOT,
      env: { ...base, ...dirs.env, PORT: String(port), HOST: "127.0.0.1", RUNPLANE_LOG_LEVEL: "info" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const exited = once(npm, "exit");
    let tree: number[] = [];
    try {
      let stderr = "";
      npm.stderr.on("data", (chunk) => (stderr += String(chunk)));
      const lines = createInterface({ input: npm.stdout });
      const listening = new Promise<void>((resolve) =>
        lines.on("line", (line) => line.includes('"listening"') && resolve())
      );
      await Promise.race([
        listening,
        exited.then(() => assert.fail(`npm start exited before the server listened: ${stderr}`)),
      ]);
      const health = await createTestClient(`http://127.0.0.1:${port}`).GET("/healthz");
      assert.equal(health.response.status, 200);
      tree = descendants(npm.pid!);
      assert.ok(tree.length > 0, "the server runs under npm");
      // A short-lived process of the tree (a shell npm ran) may be gone by now: it has no command left.
      const commands = tree.map((pid) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
        } catch {
          return [];
        }
      });
      assert.ok(
        commands.some((argv) => argv.includes("server/main.ts") && SERVER_NODE_FLAGS.every((f) => argv.includes(f))),
        `the server runs with ${SERVER_NODE_FLAGS.join(" ")}: ${JSON.stringify(commands)}`,
      );

      process.kill(npm.pid!, "SIGTERM");
      await exited;
      await waitFor(() => tree.every((pid) => !alive(pid)), "every process under npm to stop", 60_000);
      assert.equal(await portIsFree(port), true, `port ${port} is still held`);
    } finally {
      for (const pid of [npm.pid!, ...tree]) if (alive(pid)) process.kill(pid, "SIGKILL");
      await dirs.remove();
    }
  });
});
