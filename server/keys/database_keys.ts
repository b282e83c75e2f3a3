/**
 * Keys kept in the store's `keys` table, sealed with the master key (AES-256-GCM, the secret box's
 * format): created once, by the first process, under the migration lock; read by every process.
 */
import type { Kysely } from "kysely";
import { createSecretBox } from "../secrets/mod.ts";
import type { Database, KeyTable } from "../store/schema.ts";
import { MASTER_KEY_HOWTO, type MasterKey } from "./master_key.ts";

/** What a key is for. */
export type KeyPurpose = KeyTable["purpose"];

/** A key of the table, opened. */
export interface OpenedKey {
  kid: string;
  purpose: KeyPurpose;
  /** The key's plaintext (a private JWK's text, or base64 bytes). */
  plaintext: string;
  createdAt: number;
  retiredAt: number | null;
}

/** The master key is missing, or it does not open the keys in the database. */
export class MasterKeyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MasterKeyError";
  }
}

/** The error of a PostgreSQL store started without a master key. */
export function missingMasterKey(): MasterKeyError {
  return new MasterKeyError(
    `RUNPLANE_MASTER_KEY is not set: with PostgreSQL the signing and data keys are kept in the database, sealed with it; ${MASTER_KEY_HOWTO}`,
  );
}

/** A new key of `purpose`: its id and its plaintext. */
export type CreateKey = () => Promise<{ kid: string; plaintext: string }>;

/**
 * Creates a key of each purpose that has no unretired one yet, sealed with `masterKey`. Run it where
 * only one process runs at a time (`openStore`'s `bootstrap`, under the migration lock), so that of
 * processes starting at once exactly one creates the keys.
 */
export async function ensureDatabaseKeys(
  db: Kysely<Database>,
  masterKey: MasterKey,
  create: Record<KeyPurpose, CreateKey>,
): Promise<void> {
  const box = createSecretBox(masterKey.bytes());
  for (const purpose of ["signing", "data"] as const) {
    const existing = await db.selectFrom("keys").select("kid").where("purpose", "=", purpose)
      .where("retired_at", "is", null).executeTakeFirst();
    if (existing) continue;
    const { kid, plaintext } = await create[purpose]();
    await db.insertInto("keys").values({
      kid,
      purpose,
      sealed: box.seal(plaintext),
      created_at: Date.now(),
      retired_at: null,
    }).execute();
  }
}

/**
 * Reads and opens every key of the table, oldest first. Throws a `MasterKeyError` when `masterKey` does
 * not open one of them (another master key sealed it).
 */
export async function readDatabaseKeys(db: Kysely<Database>, masterKey: MasterKey): Promise<OpenedKey[]> {
  const box = createSecretBox(masterKey.bytes());
  const rows = await db.selectFrom("keys").selectAll().orderBy("created_at").orderBy("kid").execute();
  return rows.map((row) => {
    let plaintext: string;
    try {
      plaintext = box.open(row.sealed);
    } catch {
      throw new MasterKeyError(
        "RUNPLANE_MASTER_KEY does not open the keys in the database: give this process the master key the other processes of this database were started with",
      );
    }
    return {
      kid: row.kid,
      purpose: row.purpose,
      plaintext,
      createdAt: Number(row.created_at),
      retiredAt: row.retired_at === null ? null : Number(row.retired_at),
    };
  });
}

/**
 * The ids of the signing keys that may still have live tokens: those not retired, and those retired
 * while a service account whose token they signed is still neither expired nor revoked.
 */
export async function liveSigningKids(db: Kysely<Database>, now: number): Promise<string[]> {
  const rows = await db.selectFrom("keys").select("kid").where("purpose", "=", "signing")
    .where((eb) =>
      eb.or([
        eb("retired_at", "is", null),
        eb.exists(
          eb.selectFrom("service_accounts").select("service_accounts.id")
            .whereRef("service_accounts.created_at", "<=", "keys.retired_at")
            .where("service_accounts.expires_at", ">", now)
            .where("service_accounts.revoked_at", "is", null),
        ),
      ])
    )
    .orderBy("created_at").orderBy("kid").execute();
  return rows.map((row) => row.kid);
}
