import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { createSandbox, type Sandbox, unjailedSandbox } from "../../server/sandbox/mod.ts";
import { ReplicaTemplate } from "../../server/runtime/_replica_template.ts";
import { waitFor } from "../_helpers/apps.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";

/** The parent pid of `pid` (field 4 of /proc/<pid>/stat), or undefined once it is gone. */
async function parentOf(pid: number): Promise<number | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return fields[0] && fields[0] !== "Z" ? Number(fields[1]) : undefined;
}

/** Whether `pid` still runs (a zombie does not). */
async function alive(pid: number): Promise<boolean> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
  return stat !== "" && stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
}

/** Forks a replica from a template in `sandbox`, SIGKILLs the template alone, and waits for the fork to end. */
async function forkOutlivesNoTemplate(sandbox: Sandbox, appDir: string): Promise<void> {
  const template = new ReplicaTemplate({
    appDir,
    label: "p-orphans/app",
    python: "/usr/bin/python3",
    concurrency: 1,
    preload: [],
    logger: createLogger({ level: "silent" }),
    sandbox,
    jail: { projectId: "p-orphans", cwd: appDir, readOnly: [appDir], egress: false, env: {} },
  });
  let forkPid: number | undefined;
  try {
    const worker = await template.fork();
    forkPid = worker.pid!;
    const templatePid = (await parentOf(forkPid))!;
    assert.ok(templatePid > 1, "the fork's parent is its template");
    // The template alone, not its group: the fork must not be reached by this signal.
    process.kill(templatePid, "SIGKILL");
    await waitFor(async () => !(await alive(forkPid!)), "the fork to end with its template", 10_000);
  } finally {
    // A fork left alive holds the template's output pipes open: end it, or closing would wait for it.
    if (forkPid !== undefined && (await alive(forkPid))) process.kill(forkPid, "SIGKILL");
    await template.close();
  }
}

describe("a template killed alone takes its forked replicas with it", () => {
  let appDir: string;
  before(async () => {
    appDir = await mkdtemp(join(tmpdir(), "runplane-orphans-"));
    await chmod(appDir, 0o755);
    await writeFile(join(appDir, "main.py"), "def hello():\n    return {}\n");
  });
  after(() => rm(appDir, { recursive: true, force: true }));

  it("unjailed (the template loads prctl for its forks: --unjailed)", async () => {
    const sandbox = unjailedSandbox();
    try {
      await forkOutlivesNoTemplate(sandbox, appDir);
    } finally {
      sandbox.close();
    }
  });

  it("jailed (the jail's pid namespace ends with the template)", async (context) => {
    if (!(await sandboxWorks("a jailed template's forks ending with it"))) return context.skip("no sandbox here");
    const sandbox = await createSandbox("required", { logger: createLogger({ level: "silent" }) });
    try {
      await forkOutlivesNoTemplate(sandbox, appDir);
    } finally {
      sandbox.close();
    }
  });
});
