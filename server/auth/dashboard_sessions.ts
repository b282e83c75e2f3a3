/**
 * The dashboard's sessions as the server holds them. The browser's cookie seals the session's token, but
 * a sealed cookie alone would stay good until it expires, wherever a copy of it went: the session is good
 * only while its row is here, from sign-in to sign-out (or expiry), in the store every process shares.
 */
import { randomBytes } from "node:crypto";
import type { Kysely } from "kysely";
import { createBatchedLookup } from "../store/mod.ts";
import type { Database } from "../store/schema.ts";

/** Where sessions are recorded, ended and looked up. */
export interface SessionRecords {
  /** Records a new session and returns its id; drops the sessions that have expired. */
  start(session: { serviceAccountId: string; expiresAt: number }): Promise<string>;
  /** Ends a session: from now on `isLive` answers false for it, in every process. */
  end(id: string): Promise<void>;
  /** Whether the session is recorded, not ended and not expired (read after this call). */
  isLive(id: string): Promise<boolean>;
}

/**
 * Creates the session records over `db`. Checks asked for together share one read
 * (`createBatchedLookup`), so a page's burst of API calls costs about one statement.
 */
export function createSessionRecords(db: Kysely<Database>): SessionRecords {
  const expiries = createBatchedLookup(async (ids: string[]) => {
    const rows = await db.selectFrom("dashboard_sessions").select(["id", "expires_at"]).where("id", "in", ids)
      .execute();
    return new Map(rows.map((row) => [row.id, Number(row.expires_at)]));
  });
  return {
    async start(session) {
      const id = `ses_${randomBytes(18).toString("base64url")}`;
      const now = Date.now();
      await db.deleteFrom("dashboard_sessions").where("expires_at", "<=", now).execute();
      await db.insertInto("dashboard_sessions").values({
        id,
        service_account_id: session.serviceAccountId,
        created_at: now,
        expires_at: session.expiresAt,
      }).execute();
      return id;
    },
    async end(id) {
      await db.deleteFrom("dashboard_sessions").where("id", "=", id).execute();
    },
    async isLive(id) {
      const expiresAt = await expiries.get(id);
      return expiresAt !== undefined && expiresAt > Date.now();
    },
  };
}
