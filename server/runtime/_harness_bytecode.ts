/**
 * The worker harness as replicas run it, compiled once per server. Python compiles a script it is given
 * (`python3 _worker.py`) at every start and never caches it: for the harness that was ~18 ms of every cold
 * start on an idle machine (docs/performance.md, "Cold start: what Runplane adds"). So the
 * server copies the harness into a folder of its own and compiles it there once, with the host's python3
 * (the interpreter a replica of `python = "python3"` runs on the host's system); a replica imports it
 * (`BOOTSTRAP`), and Python's own import reads `__pycache__/_worker.<tag>.pyc` when its interpreter is that
 * one and the bytecode matches the source, and compiles the source as before otherwise (an image's
 * interpreter, a virtualenv of another version). The folder is the server's (0755, files 0644) and shown
 * read-only in jails: no tenant writes bytecode that another replica runs.
 */
import { execFile } from "node:child_process";
import { existsSync, readdirSync, rmSync } from "node:fs";
import { chmod, copyFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { Logger } from "../log.ts";
import { isAlive } from "../sandbox/mod.ts";

/** The worker harness's source in the server's tree. */
export const WORKER_PATH = fileURLToPath(new URL("./_worker.py", import.meta.url));

/** The harness a replica runs: the file given to `BOOTSTRAP` and what its jail must show (read-only). */
export interface Harness {
  /** `_worker.py`: its folder goes first on `sys.path`, as a script's would. */
  file: string;
  /** The path bound read-only into the jail: the compiled folder, or the source file alone. */
  bind: string;
}

/**
 * `python3 -u -c BOOTSTRAP <harness file> <the harness's arguments>`: runs the harness as `python3
 * <harness file> ...` would (the same `sys.argv`, its folder first on `sys.path`), but imported, so that
 * its cached bytecode is used. `-c` puts the working directory (`""`) first on `sys.path`; it is replaced.
 */
export const BOOTSTRAP = [
  "import sys",
  "del sys.argv[0]",
  "if sys.path[:1] == ['']:",
  "    del sys.path[0]",
  "sys.path.insert(0, sys.argv[0].rpartition('/')[0])",
  "import _worker",
  "_worker.main()",
].join("\n");

/** Writes `__pycache__/<name>.<tag>.pyc` beside the source, checked by the source's mtime and size. */
const COMPILE = [
  "import py_compile, sys",
  "py_compile.compile(sys.argv[1], doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)",
].join("\n");

const PREFIX = "runplane-harness-";
/** Where a jailed replica finds `python3` (the sandbox's base PATH). */
const JAIL_PATH = ["/usr/local/bin", "/usr/bin", "/bin"];

let compiled: string | undefined;
let preparing: Promise<void> | undefined;

/** The harness replicas start now: the compiled copy once `prepareHarness` has made it, else the source. */
export function currentHarness(): Harness {
  return compiled ? { file: compiled, bind: dirname(compiled) } : { file: WORKER_PATH, bind: WORKER_PATH };
}

/** Resolves once a `prepareHarness` under way has ended (at once when none is): a replica then starts. */
export function harnessPrepared(): Promise<void> {
  return preparing ?? Promise.resolve();
}

/**
 * Compiles the harness once for this process (later calls share the first's work). It never fails: on
 * any problem (no python3 on the host) replicas go on running the source, compiled at each start.
 */
export function prepareHarness(options: { logger?: Logger; python?: string } = {}): Promise<void> {
  preparing ??= compileHarness(options.python ?? hostPython()).then(
    (file) => void (compiled = file),
    (error: Error) => options.logger?.warn({ err: error }, "the worker harness is compiled at every replica start"),
  );
  return preparing;
}

/** The python3 a replica on the host's system finds first on the jail's PATH. */
function hostPython(): string {
  return JAIL_PATH.map((dir) => join(dir, "python3")).find((path) => existsSync(path)) ?? "python3";
}

async function compileHarness(python: string): Promise<string> {
  removeStaleFolders();
  const dir = await mkdtemp(join(tmpdir(), `${PREFIX}${process.pid}-`));
  process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  try {
    const file = join(dir, "_worker.py");
    await copyFile(WORKER_PATH, file);
    // Readable by the projects' uids, writable by the server alone.
    await chmod(file, 0o644);
    await promisify(execFile)(python, ["-I", "-S", "-c", COMPILE, file], { timeout: 10_000 });
    await chmod(join(dir, "__pycache__"), 0o755);
    await chmod(dir, 0o755);
    return file;
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

/** Removes the folders of servers that were killed before they could remove their own. */
function removeStaleFolders(): void {
  for (const name of readdirSync(tmpdir())) {
    const pid = Number(name.slice(PREFIX.length).split("-")[0]);
    if (name.startsWith(PREFIX) && Number.isInteger(pid) && pid !== process.pid && !isAlive(pid)) {
      rmSync(join(tmpdir(), name), { recursive: true, force: true });
    }
  }
}
