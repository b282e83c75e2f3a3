import { type Kysely, PostgresAdapter, sql } from "kysely";

/**
 * Bundles kept in chunks: `bundle_chunks` holds a bundle's bytes as rows of about 1 MiB, keyed by the
 * bundle's digest and the chunk's index, so a bundle is written from and read into a stream and never
 * held whole in memory. `bundles.chunk_count` says how many a bundle has; a bundle stored before this
 * migration keeps its bytes in `bundles.data` (`chunk_count` null) and stays readable as it is.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  // The one type that differs: raw bytes are `bytea` on PostgreSQL, `blob` on SQLite.
  const bytes = db.getExecutor().adapter instanceof PostgresAdapter ? sql`bytea` : sql`blob`;
  await db.schema.alterTable("bundles").addColumn("chunk_count", "integer").execute();
  await db.schema
    .createTable("bundle_chunks")
    .addColumn("digest", "text", (c) => c.notNull())
    .addColumn("idx", "integer", (c) => c.notNull())
    .addColumn("data", bytes, (c) => c.notNull())
    .addPrimaryKeyConstraint("bundle_chunks_pk", ["digest", "idx"])
    .execute();
}
