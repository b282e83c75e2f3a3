import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { callFunction, deployApp } from "../_helpers/apps.ts";
import { testServerSandbox } from "../_helpers/sandbox.ts";
import { startTestServer, type TestServer } from "../_helpers/server.ts";

/**
 * What the replica itself sees of its harness: the module, the bytecode beside it, whether that bytecode is
 * current for the source (its header's mtime and size, as Python's import checks them), whether it may write it.
 */
const MAIN = `
import os, struct, sys
import importlib.util

def harness():
    worker = sys.modules.get("_worker")
    if worker is None:
        return {"imported": False}
    cached = importlib.util.cache_from_source(worker.__file__)
    found = os.path.exists(cached)
    current = False
    if found:
        with open(cached, "rb") as f:
            header = f.read(16)
        flags, mtime, size = struct.unpack("<III", header[4:16])
        stat = os.stat(worker.__file__)
        current = header[:4] == importlib.util.MAGIC_NUMBER and flags == 0 and mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF
    writable = []
    for path in (worker.__file__, cached, os.path.join(os.path.dirname(cached), "new.pyc")):
        try:
            with open(path, "ab"):
                writable.append(path)
        except OSError:
            pass
    return {"imported": True, "file": worker.__file__, "cached": cached if found else None, "current": current,
            "writable": writable, "argv0": sys.argv[0]}
`;

describe("the worker harness runs from bytecode the server compiled once", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
    await deployApp(t, "bytecode", { toml: "[scaling]\nmax_replicas = 1\n", files: { "main.py": MAIN } });
  });
  after(() => t.close());

  it("imports the harness with current bytecode beside it, which the app cannot write", async () => {
    const { response, data, error } = await callFunction(t, "bytecode", "harness", {});
    assert.equal(response.status, 200, JSON.stringify(error));
    const seen = data!.result as Record<string, unknown>;
    assert.equal(seen.imported, true);
    assert.equal(
      typeof seen.cached,
      "string",
      `no bytecode beside the harness: it was compiled at this start (${JSON.stringify(seen)})`,
    );
    assert.equal(seen.current, true, "the bytecode does not match the harness's source");
    // Jailed, the folder is shown read-only (unjailed, the app is the server's user and could anyway).
    if (await testServerSandbox() === "auto") assert.deepEqual(seen.writable, []);
    // The harness sees the command line it would as a script: its own path first.
    assert.equal(seen.argv0, seen.file);
    // The copy is the server's own source, unchanged.
    assert.equal(
      await readFile(seen.file as string, "utf8"),
      await readFile(new URL("../../server/runtime/_worker.py", import.meta.url), "utf8"),
    );
  });
});
