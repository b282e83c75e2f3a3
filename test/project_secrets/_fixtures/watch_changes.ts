/**
 * Another process on a PostgreSQL store: prints `listening` once its wake-ups are listened for, then
 * `changed <project> <fingerprint>` for each project whose secrets change, until its stdin ends.
 * Usage: node --import tsx watch_changes.ts <database-url>
 */
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { createProjectSecrets } from "../../../server/project_secrets/mod.ts";
import { createSecretBox } from "../../../server/secrets/mod.ts";
import { openStore } from "../../../server/store/mod.ts";

const store = await openStore(tmpdir(), { databaseUrl: process.argv[2], migrate: false });
// Values are not opened here: a box of its own is enough to read fingerprints.
const secrets = createProjectSecrets({
  db: store.db,
  secrets: createSecretBox(randomBytes(32)),
  notifier: store.notifier,
  now: store.clock.now,
});
secrets.onChange((projectId) => {
  void secrets.fingerprint(projectId).then((fingerprint) => {
    process.stdout.write(`changed ${projectId} ${fingerprint}\n`);
  });
});
await store.notifier.listening();
process.stdout.write("listening\n");
process.stdin.resume();
process.stdin.on("end", () => void store.close().then(() => process.exit(0)));
