import { randomBytes } from "node:crypto";
import { SignJWT } from "jose";
import type { Kysely } from "kysely";
import { ensureProject } from "../store/mod.ts";
import type { Database } from "../store/schema.ts";
import { markDescendantsRevoked } from "../store/token_standing.ts";
import type { Scope } from "./scopes.ts";
import type { SigningKey } from "./signing_key.ts";

/** The issuer claim of every Runplane token. */
export const TOKEN_ISSUER = "runplane";

/** A service account as listed (never with its token). */
export interface ServiceAccount {
  id: string;
  projectId: string;
  name: string;
  scopes: Scope[];
  createdAt: Date;
  expiresAt: Date;
  revokedAt: Date | null;
  /** When its token last authenticated a request (to the minute); null if never. */
  lastUsedAt: Date | null;
}

/** What `createServiceAccount` needs beyond the store and key. */
export interface CreateServiceAccountOptions {
  projectId: string;
  name: string;
  scopes: Scope[];
  /** Unix milliseconds. */
  expiresAt: number;
  /**
   * The account whose token mints this one (over the API): revoking it, or any account up its chain,
   * revokes this one too. Absent for an account made where the server runs.
   */
  parentId?: string;
}

function randomId(prefix: string): string {
  return prefix + randomBytes(12).toString("base64url");
}

/**
 * Creates a service account (and its project, if new) and returns its token. The token is returned
 * once and never stored: only its id (`jti`) is.
 */
export async function createServiceAccount(
  deps: { db: Kysely<Database>; key: SigningKey },
  options: CreateServiceAccountOptions,
): Promise<{ account: ServiceAccount; token: string }> {
  const { db, key } = deps;
  const id = randomId("sa_");
  const tokenId = randomId("tok_");
  const now = Date.now();
  await ensureProject(db, options.projectId);
  await db.insertInto("service_accounts").values({
    id,
    project_id: options.projectId,
    name: options.name,
    scopes: options.scopes.join(" "),
    token_id: tokenId,
    created_at: now,
    expires_at: options.expiresAt,
    revoked_at: null,
    last_used_at: null,
    parent_id: options.parentId ?? null,
  }).execute();
  const token = await new SignJWT({ project_id: options.projectId, scope: options.scopes.join(" ") })
    .setProtectedHeader({ alg: "EdDSA", kid: key.kid, typ: "JWT" })
    .setIssuer(TOKEN_ISSUER)
    .setSubject(id)
    .setJti(tokenId)
    .setIssuedAt(Math.floor(now / 1000))
    .setExpirationTime(Math.floor(options.expiresAt / 1000))
    .sign(key.privateKey);
  return {
    account: {
      id,
      projectId: options.projectId,
      name: options.name,
      scopes: options.scopes,
      createdAt: new Date(now),
      expiresAt: new Date(options.expiresAt),
      revokedAt: null,
      lastUsedAt: null,
    },
    token,
  };
}

/** Lists a project's service accounts, oldest first. */
export async function listServiceAccounts(db: Kysely<Database>, projectId: string): Promise<ServiceAccount[]> {
  const rows = await db.selectFrom("service_accounts").selectAll().where("project_id", "=", projectId)
    .orderBy("created_at").orderBy("id").execute();
  return rows.map((row) => ({
    id: row.id,
    projectId: row.project_id,
    name: row.name,
    scopes: row.scopes.split(" ") as Scope[],
    createdAt: new Date(Number(row.created_at)),
    expiresAt: new Date(Number(row.expires_at)),
    revokedAt: row.revoked_at === null ? null : new Date(Number(row.revoked_at)),
    lastUsedAt: row.last_used_at === null ? null : new Date(Number(row.last_used_at)),
  }));
}

/** Whether the store holds any service account (of any project, revoked or not): a token was ever minted. */
export async function anyServiceAccount(db: Kysely<Database>): Promise<boolean> {
  return (await db.selectFrom("service_accounts").select("id").limit(1).executeTakeFirst()) !== undefined;
}

/** Records that the account's token was used at `now` (Unix ms). */
export async function touchServiceAccount(db: Kysely<Database>, input: { id: string; now: number }): Promise<void> {
  await db.updateTable("service_accounts").set({ last_used_at: input.now }).where("id", "=", input.id).execute();
}

/**
 * Revokes a service account: its token, and every token it minted (and they in turn), are refused from
 * now on; those accounts are marked revoked too. Returns false when the id is unknown (or, with
 * `projectId`, belongs to another project).
 */
export async function revokeServiceAccount(
  db: Kysely<Database>,
  id: string,
  options: { projectId?: string } = {},
): Promise<boolean> {
  let query = db.selectFrom("service_accounts").select("id").where("id", "=", id);
  if (options.projectId !== undefined) query = query.where("project_id", "=", options.projectId);
  const found = await query.executeTakeFirst();
  if (!found) return false;
  const now = Date.now();
  await db.transaction().execute(async (trx) => {
    await trx.updateTable("service_accounts").set({ revoked_at: now }).where("id", "=", id)
      .where("revoked_at", "is", null).execute();
    await markDescendantsRevoked(trx, { id, now });
  });
  return true;
}
