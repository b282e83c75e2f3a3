import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { createRunService, type RunService } from "../../server/runs/mod.ts";
import { createSecretBox } from "../../server/secrets/mod.ts";
import { openStore, type Store } from "../../server/store/mod.ts";
import { createTestExecutor } from "../_helpers/test_executor.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const config = { resultTtlMs: 86_400_000, runLeaseMs: 5_000, webhookAllowPrivate: false };

it("two dispatchers on one store file never run the same run twice", async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "runplane-dispatch-"));
  const logger = createLogger({ level: "silent" });
  const secrets = createSecretBox(new Uint8Array(32));
  const stores: Store[] = [];
  const services: RunService[] = [];
  after(async () => {
    for (const service of services) await service.stop();
    for (const store of stores) await store.close();
    await rm(dataDir, { recursive: true, force: true });
  });
  // Each service has its own connection to the same SQLite file, as separate processes would.
  const open = async () => {
    const store = await openStore(dataDir);
    stores.push(store);
    return store;
  };
  const submitter = createRunService({ db: (await open()).db, secrets, logger, config });
  services.push(submitter);
  const ids: string[] = [];
  for (let i = 0; i < 40; i++) {
    const submitted = await submitter.submit({ projectId: "p", app: `app${i % 4}`, functionName: "echo", mode: "async", input: { sleep_ms: 20 } });
    assert.equal(submitted.kind, "accepted");
    ids.push((submitted as { runId: string }).runId);
  }
  const a = createTestExecutor({ slots: 3 });
  const b = createTestExecutor({ slots: 3 });
  services.push(createRunService({ db: (await open()).db, secrets, logger, config, executor: a.executor, pollMs: 20 }));
  services.push(createRunService({ db: (await open()).db, secrets, logger, config, executor: b.executor, pollMs: 20 }));
  await eventually(async () => {
    const rows = await stores[0].db.selectFrom("runs").select("status").where("status", "=", "success").execute();
    return rows.length === 40 ? true : undefined;
  }, 30_000, "all 40 runs to succeed");
  const all = [...a.started, ...b.started];
  assert.equal(all.length, 40, "each run executed exactly once");
  assert.deepEqual([...new Set(all)].sort(), [...ids].sort());
  assert.ok(a.started.length > 0 && b.started.length > 0, `both dispatchers claimed runs (${a.started.length}/${b.started.length})`);
});
