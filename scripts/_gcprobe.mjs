// Drives the run service alone (no HTTP, no Python): 32 concurrent sync calls that take `DELAY` ms.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { openStore, ensureProject } from "../dist/server/store/mod.js";
import { createRunService } from "../dist/server/runs/mod.js";
import { createSecretBox } from "../dist/server/secrets/mod.js";
import { createLogger } from "../dist/server/log.js";
const store = await openStore(mkdtempSync(join(tmpdir(), "gcp-")));
await ensureProject(store.db, "p");
const runs = createRunService({ db: store.db, secrets: createSecretBox(randomBytes(32)), logger: createLogger({ level: "warn" }), config: { resultTtlMs: 3600000, runLeaseMs: 30000, webhookAllowPrivate: true } });
const DELAY = Number(process.env.DELAY ?? 2);
let done = 0; const end = Date.now() + 6000;
async function lane() {
  while (Date.now() < end) {
    const ac = new AbortController();
    const s = await runs.submit({ projectId: "p", app: "echo", functionName: "run", mode: "sync", input: { name: "bench" }, signal: process.env.NOSIG ? undefined : ac.signal });
    await new Promise((r) => setTimeout(r, DELAY));
    await s.run.succeed({ hello: "bench" });
    done++;
  }
}
await Promise.all(Array.from({ length: 32 }, lane));
console.error("calls/s", Math.round(done / 6));
await runs.stop(); await store.close();
