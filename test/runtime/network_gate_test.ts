/**
 * The worker harness's network gate (`--network-fd`, `SandboxSpawnOptions.networkGate`): the interpreter
 * and the harness start at once, while the server attaches the jail's network, and the preload and
 * main.py are imported only once the server says `x` on the gate. A gate that closes without it (the
 * network could not be set up) ends the harness before any of the app's code runs.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { BOOTSTRAP, currentHarness, prepareHarness } from "../../server/runtime/mod.ts";
import { waitFor } from "../_helpers/apps.ts";

/** The gate's descriptor in the harness: after its requests (3) and messages (4). */
const GATE_FD = 5;
/** Linux's number of `read` (`/proc/<pid>/syscall` names the call a process is blocked in). */
const READ_SYSCALL = process.arch === "arm64" ? 63 : 0;

describe("the worker harness's network gate", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-gate-"));
    await writeFile(
      join(dir, "main.py"),
      `open(${JSON.stringify(join(dir, "imported"))}, "w").close()\n\ndef hello():\n    return 1\n`,
    );
    await prepareHarness();
  });
  after(() => rm(dir, { recursive: true, force: true }));

  /** The harness on `dir`'s app with its gate, its messages gathered in `messages()`. */
  function startHarness(): { child: ChildProcess; gate: Writable; messages: () => string } {
    const child = spawn(
      "python3",
      ["-u", "-c", BOOTSTRAP, currentHarness().file, dir, "1", `--network-fd=${GATE_FD}`],
      { cwd: dir, stdio: ["ignore", "pipe", "pipe", "pipe", "pipe", "pipe"] },
    );
    let text = "";
    (child.stdio[4] as Readable).setEncoding("utf8").on("data", (chunk: string) => (text += chunk));
    child.stdout!.resume();
    child.stderr!.resume();
    return { child, gate: (child.stdio as unknown[])[GATE_FD] as Writable, messages: () => text };
  }

  /** Whether `pid` is blocked reading its gate (the first word of /proc/<pid>/syscall, then the fd). */
  async function readingGate(pid: number): Promise<boolean> {
    const [call, fd] = (await readFile(`/proc/${pid}/syscall`, "utf8").catch(() => "")).split(" ");
    return Number(call) === READ_SYSCALL && Number(fd) === GATE_FD;
  }

  it("imports main.py only once the gate says x, then is ready", async () => {
    const { child, gate, messages } = startHarness();
    try {
      await waitFor(() => readingGate(child.pid!), "the harness to wait on its gate");
      assert.equal(existsSync(join(dir, "imported")), false, "main.py was imported before the network was in");
      assert.equal(messages(), "");
      gate.end("x");
      await waitFor(() => /"op": ?"ready"/.test(messages()), "ready");
      assert.equal(existsSync(join(dir, "imported")), true);
    } finally {
      child.kill("SIGKILL");
      await rm(join(dir, "imported"), { force: true });
    }
  });

  it("exits without importing main.py when the gate closes without a word", async () => {
    const { child, gate, messages } = startHarness();
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    await waitFor(() => readingGate(child.pid!), "the harness to wait on its gate");
    gate.end();
    assert.equal(await exited, 3);
    assert.equal(existsSync(join(dir, "imported")), false);
    assert.equal(messages(), "");
  });
});
