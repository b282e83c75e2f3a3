/**
 * Reloads of the runtime run one at a time: a reload that read the deployed apps before a newer
 * deployment was served, and finishes after the reload that installed it, must not put the old version
 * back (the building process's "ready" would then reach the previous version).
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createLogger } from "../../server/log.ts";
import { newRunId } from "../../server/runs/mod.ts";
import { createRuntime, type DeployedApp } from "../../server/runtime/mod.ts";

const silent = createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, done) => done() }) });

it("a slow reload that began first does not undo a newer one", async () => {
  const root = await mkdtemp(join(tmpdir(), "runplane-reload-order-"));
  const appsDir = join(root, "apps");
  await mkdir(appsDir);
  const version = async (v: string): Promise<DeployedApp> => {
    const dir = join(root, `dep_${v}`);
    await mkdir(dir);
    const configToml = '[deployment]\nname = "app"\n';
    await writeFile(join(dir, "runplane.toml"), configToml);
    await writeFile(join(dir, "main.py"), `def run():\n    return "${v}"\n`);
    return { projectId: "p-x", name: "app", dir, version: `dep_${v}`, configToml };
  };
  let served = [await version("1")];
  // The first reload's read of the project's secrets is slow, so it ends after the second.
  let slowOnce = true;
  const runtime = createRuntime(appsDir, {
    logger: silent,
    queueLimit: 10,
    pollIntervalMs: 3_600_000,
    deployedApps: () => served,
    async projectEnvironment() {
      if (slowOnce) {
        slowOnce = false;
        await sleep(500);
      }
      return { env: {}, fingerprint: "" };
    },
  });
  try {
    const first = runtime.reload();
    await sleep(50); // the first reload has read version 1 and waits for the secrets
    served = [await version("2")];
    await Promise.all([first, runtime.reload()]);
    const outcome = await runtime.invoke({
      projectId: "p-x",
      app: "app",
      functionName: "run",
      input: {},
      runId: newRunId(),
    });
    assert.equal(outcome.kind === "result" && outcome.result, "2", "the newer deployment serves");
  } finally {
    await runtime.close();
    await rm(root, { recursive: true, force: true });
  }
});
