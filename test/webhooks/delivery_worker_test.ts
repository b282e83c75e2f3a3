import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { createSecretBox } from "../../server/secrets/mod.ts";
import { openStore } from "../../server/store/mod.ts";
import { enqueueDelivery, startDeliveryWorker } from "../../server/webhooks/mod.ts";
import { eventually, startWebhookReceiver } from "../_helpers/webhook_receiver.ts";

it("works through a backlog bigger than one claim without waiting for the next poll", async () => {
  const dir = mkdtempSync(join(tmpdir(), "runplane-outbox-"));
  const store = await openStore(dir);
  const receiver = await startWebhookReceiver();
  // A backlog, as after a restart or a receiver outage: nothing wakes the worker for these.
  const count = 300;
  await store.db.transaction().execute(async (trx) => {
    for (let i = 0; i < count; i++) {
      await enqueueDelivery(trx, { runId: `run_${String(i).padStart(26, "0")}`, endpoint: receiver.url, body: `{"n":${i}}`, sealedSecret: null });
    }
  });
  const worker = startDeliveryWorker({
    db: store.db,
    secrets: createSecretBox(randomBytes(32)),
    logger: createLogger({ level: "silent" }),
    headerVendor: "Runplane",
    timeoutMs: 5_000,
    retryDelayMs: 1_000,
    guard: { allowPrivate: true },
    // The first run happens at start; the next poll would be far beyond the test's patience.
    pollMs: 600_000,
    maxInFlight: 16,
  });
  try {
    await receiver.waitFor(count);
    await eventually(async () => {
      const { n } = await store.db.selectFrom("webhook_deliveries").select((eb) => eb.fn.countAll<number>().as("n")).where("status", "!=", "delivered").executeTakeFirstOrThrow();
      return Number(n) === 0 ? true : undefined;
    }, 20_000, "every delivery to be recorded delivered");
    assert.equal(new Set(receiver.requests.map((r) => r.body.toString())).size, count, "each delivery is sent once");
  } finally {
    await worker.stop();
    await receiver.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
