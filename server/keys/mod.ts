/**
 * The keys a process works with: the token-signing keys and the secret box's data key. On SQLite they are
 * files of the data dir (created on first use); on PostgreSQL they live in the database, sealed with the
 * master key, created once by the first process and shared by every process.
 */
import { randomBytes } from "node:crypto";
import type { Kysely } from "kysely";
import {
  generateSigningJwk,
  loadOrCreateSigningKey,
  type SigningKey,
  signingKeyFromJwk,
  type SigningKeys,
  singleSigningKey,
} from "../auth/mod.ts";
import { createSecretBox, loadSecretBox, type SecretBox } from "../secrets/mod.ts";
import type { Database } from "../store/mod.ts";
import {
  ensureDatabaseKeys,
  liveSigningKids,
  missingMasterKey,
  type OpenedKey,
  readDatabaseKeys,
} from "./database_keys.ts";
import type { MasterKey } from "./master_key.ts";

export { MasterKeyError } from "./database_keys.ts";
export { MASTER_KEY_HOWTO, MasterKey, parseMasterKey } from "./master_key.ts";

/** A process's keys. */
export interface ProcessKeys {
  signing: SigningKeys;
  /** Seals with the current data key; opens what any data key sealed. */
  secrets: SecretBox;
}

/** Options of `loadKeys` and `keysBootstrap`. */
export interface KeysOptions {
  /** Where SQLite's key files are. */
  dataDir: string;
  /** Needed with PostgreSQL; unused with SQLite. */
  masterKey: MasterKey | null;
  /** How long an unknown `kid` waits before the keys are read again (default 5 s). */
  refreshIntervalMs?: number;
}

const CREATE_KEY = {
  async signing() {
    const plaintext = await generateSigningJwk();
    return { kid: (await signingKeyFromJwk(plaintext)).kid, plaintext };
  },
  data() {
    return Promise.resolve({
      kid: `data_${randomBytes(8).toString("hex")}`,
      plaintext: randomBytes(32).toString("base64"),
    });
  },
};

/**
 * `openStore`'s `bootstrap` hook: in a shared store (PostgreSQL), creates the signing and data keys when the database has
 * none (under the migration lock, so once). Throws a `MasterKeyError` on PostgreSQL without a master key.
 */
export function keysBootstrap(
  masterKey: MasterKey | null,
): (db: Kysely<Database>, store: { shared: boolean }) => Promise<void> {
  return async (db, store) => {
    // A store of one host keeps no keys: they are files in the data dir.
    if (!store.shared) return;
    if (!masterKey) throw missingMasterKey();
    await ensureDatabaseKeys(db, masterKey, CREATE_KEY);
  };
}

/**
 * Loads the process's keys: the data dir's key files on SQLite (created on first use), the database's
 * keys on PostgreSQL (run `keysBootstrap` first). Throws a `MasterKeyError` on PostgreSQL when the master
 * key is missing or does not open the keys.
 */
export async function loadKeys(
  store: { db: Kysely<Database>; shared: boolean },
  options: KeysOptions,
): Promise<ProcessKeys> {
  if (!store.shared) {
    return {
      signing: singleSigningKey(await loadOrCreateSigningKey(options.dataDir)),
      secrets: await loadSecretBox(options.dataDir),
    };
  }
  const masterKey = options.masterKey;
  if (!masterKey) throw missingMasterKey();
  const db = store.db;
  const opened = await readDatabaseKeys(db, masterKey);
  const signing = new Map<string, SigningKey>();
  async function remember(keys: OpenedKey[]): Promise<void> {
    for (const key of keys) {
      if (key.purpose === "signing" && !signing.has(key.kid)) {
        signing.set(key.kid, await signingKeyFromJwk(key.plaintext));
      }
    }
  }
  await remember(opened);
  const current = newestUnretired(opened, "signing");
  const data = newestUnretired(opened, "data");
  if (!current || !data) throw new Error("The database has no signing or data key: open the store with keysBootstrap");
  const refreshIntervalMs = options.refreshIntervalMs ?? 5000;
  let lastRead = Date.now();
  let reading: Promise<void> | undefined;
  /** Reads the keys again (a key made by a rotation elsewhere), at most once per interval. */
  function refresh(): Promise<void> {
    if (Date.now() - lastRead < refreshIntervalMs) return reading ?? Promise.resolve();
    lastRead = Date.now();
    reading = readDatabaseKeys(db, masterKey!).then(remember);
    return reading;
  }
  const dataBoxes = opened.filter((key) => key.purpose === "data" && key.kid !== data.kid).map((key) =>
    createSecretBox(Buffer.from(key.plaintext, "base64"))
  );
  const currentBox = createSecretBox(Buffer.from(data.plaintext, "base64"));
  return {
    signing: {
      current: signing.get(current.kid)!,
      async find(kid) {
        if (!signing.has(kid)) await refresh().catch(() => {});
        return signing.get(kid);
      },
      async jwks() {
        const live = await liveSigningKids(db, Date.now());
        if (live.some((kid) => !signing.has(kid))) await refresh();
        return live.flatMap((kid) => signing.get(kid)?.publicJwk ?? []);
      },
    },
    secrets: {
      seal: (plaintext) => currentBox.seal(plaintext),
      open(sealed) {
        try {
          return currentBox.open(sealed);
        } catch (error) {
          // A value sealed before a data-key rotation: the older keys are tried too.
          for (const box of dataBoxes) {
            try {
              return box.open(sealed);
            } catch {
              // Not this one.
            }
          }
          throw error;
        }
      },
    },
  };
}

function newestUnretired(keys: OpenedKey[], purpose: OpenedKey["purpose"]): OpenedKey | undefined {
  return keys.filter((key) => key.purpose === purpose && key.retiredAt === null).at(-1);
}
