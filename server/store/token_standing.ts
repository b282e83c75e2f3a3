/**
 * How service-account tokens stand, read up the chain of accounts that minted them: a token is good only
 * while its own account and every account up its chain are unrevoked. The statements walk the chain by
 * `parent_id` (a recursive query, one index probe per level; a token made where the server runs has no
 * level above it), so the revocation read on every authenticated call stays one statement.
 */
import type { Kysely } from "kysely";
import { type DialectStatement, type Queryable, rawStatement } from "./mod.ts";
import type { Database } from "./schema.ts";

/** A token's account and the first revocation found up its chain. */
export interface TokenStanding {
  token_id: string;
  /** The account whose token it is. */
  id: string;
  /** When it or an account up its chain was revoked (its own first); null while none is. */
  revoked_at: number | string | null;
}

/**
 * The chain is walked at most this deep: a longer one (never made: each account's parent exists before
 * it) reads as broken, so its token is refused rather than the walk never ending.
 */
const MAX_CHAIN = 64;

/**
 * The walk from the accounts of the tokens `anchor` selects up to the first account with no parent. A
 * token whose chain is broken (an account missing, or past `MAX_CHAIN`) has no such row and no answer.
 */
function chainQuery(anchor: string): string {
  return `with recursive "chain" ("token_id", "id", "parent_id", "revoked_at", "depth") as (`
    + `select "token_id", "id", "parent_id", "revoked_at", 0 from "service_accounts" where ${anchor} `
    + `union all select "chain"."token_id", "chain"."id", "up"."parent_id", `
    + `coalesce("chain"."revoked_at", "up"."revoked_at"), "chain"."depth" + 1 `
    + `from "chain" join "service_accounts" as "up" on "up"."id" = "chain"."parent_id" `
    + `where "chain"."depth" < ${MAX_CHAIN}) `
    + `select "token_id", "id", "revoked_at" from "chain" where "parent_id" is null`;
}

const selectOne = rawStatement<TokenStanding>(chainQuery(`"token_id" = ?`));

const many: DialectStatement = {
  sqlite: chainQuery(`"token_id" in (select "value" from json_each(?))`),
  postgres: chainQuery(`"token_id" = any($1::text[])`),
  postgresParameters: ([ids]) => [JSON.parse(String(ids))],
};
const selectMany = rawStatement<TokenStanding>(many);

/**
 * How each of `tokenIds` stands, by token id (a token with no account, or a broken chain, is left out).
 * One statement whatever their number, prepared on PostgreSQL.
 */
export async function selectTokenStandings(
  db: Kysely<Database>,
  tokenIds: readonly string[],
): Promise<Map<string, TokenStanding>> {
  const { rows } = tokenIds.length === 1
    ? await selectOne(db, tokenIds)
    : await selectMany(db, [JSON.stringify(tokenIds)]);
  return new Map(rows.map((row) => [row.token_id, row]));
}

const revokeDescendants = rawStatement(
  `update "service_accounts" set "revoked_at" = ? where "revoked_at" is null and "id" in (`
    + `with recursive "minted" ("id", "depth") as (select "id", 0 from "service_accounts" where "parent_id" = ? `
    + `union all select "down"."id", "minted"."depth" + 1 from "minted" `
    + `join "service_accounts" as "down" on "down"."parent_id" = "minted"."id" where "minted"."depth" < ${MAX_CHAIN}) `
    + `select "id" from "minted")`,
);

/**
 * Marks revoked at `now` the unrevoked accounts minted, directly or further down, by account `id`, so
 * that lists show them revoked. Verification does not rely on it: it reads the chain itself.
 */
export async function markDescendantsRevoked(db: Queryable, input: { id: string; now: number }): Promise<void> {
  await revokeDescendants(db, [input.now, input.id]);
}
