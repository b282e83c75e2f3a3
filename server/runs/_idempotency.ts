/**
 * `Idempotency-Key`: a key is bound to the fingerprint of its first request and the run it made, for
 * 24 hours. Reserving is an insert that only one request can win, also across processes.
 */
import { createHash } from "node:crypto";
import type { Transaction } from "kysely";
import type { Database } from "../store/mod.ts";

/** How long a key stays bound. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3_600_000;

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.keys(value).sort().map((k) => [k, canonical((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}

/** A fingerprint of what makes two requests the same: target, mode, body and webhook endpoint. */
export function fingerprint(request: Record<string, unknown>): string {
  return createHash("sha256").update(JSON.stringify(canonical(request))).digest("hex");
}

/** What reserving a key found. */
export type KeyReservation =
  | { fresh: true }
  | { fresh: false; runId: string; fingerprint: string };

/** Binds `key` to `runId` unless it is already bound (within the window); says which it was. */
export async function reserveKey(
  trx: Transaction<Database>,
  options: { projectId: string; key: string; fingerprint: string; runId: string; now: number },
): Promise<KeyReservation> {
  const { projectId, key, now } = options;
  await trx
    .deleteFrom("idempotency_keys")
    .where("project_id", "=", projectId)
    .where("key", "=", key)
    .where("created_at", "<=", now - IDEMPOTENCY_WINDOW_MS)
    .execute();
  const inserted = await trx
    .insertInto("idempotency_keys")
    .values({ project_id: projectId, key, fingerprint: options.fingerprint, run_id: options.runId, created_at: now })
    .onConflict((oc) => oc.columns(["project_id", "key"]).doNothing())
    .executeTakeFirst();
  if (Number(inserted.numInsertedOrUpdatedRows ?? 0) === 1) return { fresh: true };
  const existing = await trx
    .selectFrom("idempotency_keys")
    .select(["run_id", "fingerprint"])
    .where("project_id", "=", projectId)
    .where("key", "=", key)
    .executeTakeFirstOrThrow();
  return { fresh: false, runId: existing.run_id, fingerprint: existing.fingerprint };
}
