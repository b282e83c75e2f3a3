/**
 * The deployment records' store queries: bundles kept once by digest, apps, deployments with their
 * build claims, and build log lines. Every state change is one conditional statement.
 */
import type { Kysely, Selectable } from "kysely";
import { type Database, isUniqueViolation } from "../store/mod.ts";
import { claimBuild } from "../store/statements/deployments.ts";
import { bundleFileSource, keepBundleFile } from "./_bundle_files.ts";
import { BUNDLE_CHUNK_BYTES, type BundleSource } from "./_bundle_source.ts";

export { BUNDLE_CHUNK_BYTES, type BundleSource } from "./_bundle_source.ts";
import type { DeploymentTable } from "../store/schema.ts";

/** A deployment as stored. */
export type DeploymentRow = Selectable<DeploymentTable>;

/** What a new deployment is made of. */
export interface NewDeployment {
  deploymentId: string;
  projectId: string;
  appId: string;
  bundle: BundleSource;
  source: "bundle" | "repository";
  repository?: { owner: string; repo: string; ref: string; commit: string; path: string };
  /** What its deployer said it is. */
  message?: string;
  /** The git commit its files come from, and whether its folder held changes that commit does not. */
  commit?: string;
  dirty?: boolean;
  now: number;
}

/**
 * Stores a deployment, `queued`: its bundle (unless the same bytes are stored already; chunk by chunk, read
 * from the source as they are written), its app (made, or brought back when it was deleted) and its row,
 * in one transaction.
 */
export async function insertDeployment(
  db: Kysely<Database>,
  deployment: NewDeployment,
  options: { bundleDir?: string } = {},
): Promise<DeploymentRow> {
  // Kept before the row that names it commits, so that whoever reads the row finds the file.
  if (options.bundleDir) await keepBundleFile(options.bundleDir, deployment.bundle);
  return await db.transaction().execute(async (tx) => {
    await tx
      .insertInto("projects")
      .values({ id: deployment.projectId, created_at: deployment.now })
      .onConflict((oc) => oc.column("id").doNothing())
      .execute();
    await insertBundle(tx, deployment.bundle, { now: deployment.now, inFile: options.bundleDir !== undefined });
    await tx
      .insertInto("apps")
      .values({
        project_id: deployment.projectId,
        app_id: deployment.appId,
        created_at: deployment.now,
        active_deployment_id: null,
        deleted_at: null,
      })
      .onConflict((oc) => oc.columns(["project_id", "app_id"]).doUpdateSet({ deleted_at: null }))
      .execute();
    return await tx
      .insertInto("deployments")
      .values({
        deployment_id: deployment.deploymentId,
        project_id: deployment.projectId,
        app_id: deployment.appId,
        status: "queued",
        bundle_digest: deployment.bundle.digest,
        size_bytes: deployment.bundle.size,
        source: deployment.source,
        repository_json: deployment.repository ? JSON.stringify(deployment.repository) : null,
        base_image_digest: null,
        base_image_status: null,
        config_toml: null,
        image_reference: null,
        image_digest: null,
        message: deployment.message ?? null,
        git_commit: deployment.commit ?? null,
        git_dirty: deployment.dirty ? 1 : 0,
        created_at: deployment.now,
        started_at: null,
        finished_at: null,
        error: null,
        lease_owner: null,
        lease_expires_at: null,
      })
      .returningAll()
      .executeTakeFirstOrThrow();
  });
}

/**
 * Stores a bundle's row and its chunks (none when `inFile`: its bytes are a kept file, see
 * _bundle_files.ts), unless a bundle of the same digest is stored already.
 */
async function insertBundle(
  tx: Kysely<Database>,
  bundle: BundleSource,
  options: { now: number; inFile: boolean },
): Promise<void> {
  const now = options.now;
  const inserted = await tx
    .insertInto("bundles")
    .values({
      digest: bundle.digest,
      size_bytes: bundle.size,
      data: new Uint8Array(0),
      created_at: now,
      chunk_count: 0,
    })
    .onConflict((oc) => oc.column("digest").doNothing())
    .returning("digest")
    .executeTakeFirst();
  if (!inserted || options.inFile) return;
  let idx = 0;
  for await (const chunk of bundle.chunks()) {
    if (chunk.byteLength > BUNDLE_CHUNK_BYTES) throw new Error(`insertBundle: a chunk of ${chunk.byteLength} bytes`);
    await tx.insertInto("bundle_chunks").values({ digest: bundle.digest, idx: idx++, data: chunk }).execute();
  }
  await tx.updateTable("bundles").set({ chunk_count: idx }).where("digest", "=", bundle.digest).execute();
}

/** A stored bundle: its length, and its bytes read from the store a chunk at a time. */
export interface StoredBundle {
  size: number;
  chunks: AsyncIterable<Uint8Array>;
}

/**
 * A stored bundle, or undefined. Its kept file when `bundleDir` has one (SQLite), else its chunks, read one
 * row at a time as they are consumed; a bundle stored before migration 0021 (its bytes in `bundles.data`)
 * comes as one chunk.
 */
export async function selectBundle(
  db: Kysely<Database>,
  digest: string,
  options: { bundleDir?: string } = {},
): Promise<StoredBundle | undefined> {
  const kept = options.bundleDir ? await bundleFileSource(options.bundleDir, digest) : undefined;
  if (kept) return kept;
  const row = await db.selectFrom("bundles").select(["size_bytes", "chunk_count"]).where("digest", "=", digest)
    .executeTakeFirst();
  if (!row) return undefined;
  const count = row.chunk_count === null ? null : Number(row.chunk_count);
  // A row whose bytes were kept in a file that is gone: missing, not empty.
  if (count === 0 && Number(row.size_bytes) > 0) return undefined;
  async function* chunks(): AsyncGenerator<Uint8Array> {
    if (count === null) {
      const legacy = await db.selectFrom("bundles").select("data").where("digest", "=", digest)
        .executeTakeFirstOrThrow();
      yield new Uint8Array(legacy.data);
      return;
    }
    for (let idx = 0; idx < count; idx++) {
      const chunk = await db.selectFrom("bundle_chunks").select("data").where("digest", "=", digest)
        .where("idx", "=", idx).executeTakeFirst();
      if (!chunk) throw new Error(`The bundle ${digest} misses its chunk ${idx} in the store`);
      yield chunk.data;
    }
  }
  return { size: Number(row.size_bytes), chunks: chunks() };
}

/** One deployment of an app, or undefined. */
export function selectDeployment(
  db: Kysely<Database>,
  where: { projectId: string; appId: string; deploymentId: string },
): Promise<DeploymentRow | undefined> {
  return db
    .selectFrom("deployments")
    .selectAll()
    .where("deployment_id", "=", where.deploymentId)
    .where("project_id", "=", where.projectId)
    .where("app_id", "=", where.appId)
    .executeTakeFirst();
}

/** An app's deployments, newest first, after `before` (a deployment id) when given. */
export function selectDeployments(
  db: Kysely<Database>,
  where: { projectId: string; appId: string; before?: string; limit: number },
): Promise<DeploymentRow[]> {
  let query = db
    .selectFrom("deployments")
    .selectAll()
    .where("project_id", "=", where.projectId)
    .where("app_id", "=", where.appId);
  if (where.before) query = query.where("deployment_id", "<", where.before);
  return query.orderBy("deployment_id", "desc").limit(where.limit).execute();
}

/** A deployed app as stored, with its newest deployment's status and error. */
export interface AppRow {
  project_id: string;
  app_id: string;
  created_at: number;
  active_deployment_id: string | null;
}

/** The apps of a project made by deploying, not deleted (one app when `appId` is given). */
export function selectApps(db: Kysely<Database>, where: { projectId: string; appId?: string }): Promise<AppRow[]> {
  let query = db
    .selectFrom("apps")
    .select(["project_id", "app_id", "created_at", "active_deployment_id"])
    .where("project_id", "=", where.projectId)
    .where("deleted_at", "is", null);
  if (where.appId) query = query.where("app_id", "=", where.appId);
  return query.orderBy("app_id").execute();
}

/** Every app, of every project, whose active deployment this process should serve. */
export function selectActiveDeployments(db: Kysely<Database>): Promise<DeploymentRow[]> {
  return db
    .selectFrom("deployments")
    .innerJoin(
      "apps",
      (join) =>
        join.onRef("apps.active_deployment_id", "=", "deployments.deployment_id").on("apps.deleted_at", "is", null),
    )
    .selectAll("deployments")
    .execute();
}

/**
 * Every app, of every project, that no deployment serves though one of its builds failed: the newest
 * failed deployment of each app without an active one (a deleted app left out).
 */
export async function selectUnservedApps(
  db: Kysely<Database>,
): Promise<Array<Pick<DeploymentRow, "project_id" | "app_id" | "deployment_id" | "error">>> {
  const rows = await db
    .selectFrom("deployments")
    .innerJoin("apps", (join) =>
      join
        .onRef("apps.project_id", "=", "deployments.project_id")
        .onRef("apps.app_id", "=", "deployments.app_id")
        .on("apps.active_deployment_id", "is", null)
        .on("apps.deleted_at", "is", null))
    .where("deployments.status", "=", "failed")
    .select(["deployments.project_id", "deployments.app_id", "deployments.deployment_id", "deployments.error"])
    .orderBy("deployments.deployment_id", "desc")
    .execute();
  const newest = new Map<string, (typeof rows)[number]>();
  for (const row of rows) {
    if (!newest.has(`${row.project_id}/${row.app_id}`)) newest.set(`${row.project_id}/${row.app_id}`, row);
  }
  return [...newest.values()];
}

/** Marks an app deleted (its deployments and runs stay); false when there was no such app. */
export async function markAppDeleted(
  db: Kysely<Database>,
  where: { projectId: string; appId: string; now: number },
): Promise<boolean> {
  const result = await db
    .updateTable("apps")
    .set({ deleted_at: where.now })
    .where("project_id", "=", where.projectId)
    .where("app_id", "=", where.appId)
    .where("deleted_at", "is", null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** Makes a `ready` deployment its app's active one; false when it is not `ready` (or the app is deleted). */
export async function activate(
  db: Kysely<Database>,
  where: { projectId: string; appId: string; deploymentId: string },
): Promise<boolean> {
  const result = await db
    .updateTable("apps")
    .set({ active_deployment_id: where.deploymentId })
    .where("project_id", "=", where.projectId)
    .where("app_id", "=", where.appId)
    .where("deleted_at", "is", null)
    .where((eb) =>
      eb.exists(
        eb.selectFrom("deployments").select("deployment_id")
          .where("deployment_id", "=", where.deploymentId)
          .where("status", "=", "ready"),
      )
    )
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** Claims one queued build for `owner`, or undefined when none can start now. */
export async function claimNextBuild(
  db: Kysely<Database>,
  options: { owner: string; leaseMs: number; now: number },
): Promise<DeploymentRow | undefined> {
  try {
    const { rows } = await claimBuild(db, [options.now, options.owner, options.now + options.leaseMs]);
    return rows[0];
  } catch (error) {
    // Another process claimed a build of the same app at the same instant: try again at the next poll.
    if (isUniqueViolation(error)) return undefined;
    throw error;
  }
}

/** Extends the lease of `owner`'s build; false when it is no longer building under that owner. */
export async function renewBuildLease(
  db: Kysely<Database>,
  options: { deploymentId: string; owner: string; until: number },
): Promise<boolean> {
  const result = await db
    .updateTable("deployments")
    .set({ lease_expires_at: options.until })
    .where("deployment_id", "=", options.deploymentId)
    .where("lease_owner", "=", options.owner)
    .where("status", "=", "building")
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/**
 * Records what the build found out before it ended: the base-image digest and whether it was cached, and
 * (when it planned its steps) the `runplane.toml` it read.
 */
export async function recordBaseImage(
  db: Kysely<Database>,
  options: { deploymentId: string; digest: string; status: "new" | "cached" | null; configToml?: string },
): Promise<void> {
  const config = options.configToml === undefined ? {} : { config_toml: options.configToml };
  await db
    .updateTable("deployments")
    .set({ base_image_digest: options.digest, base_image_status: options.status, ...config })
    .where("deployment_id", "=", options.deploymentId)
    .execute();
}

/**
 * Records the OCI image a deployment runs in (`[build] base_image`), once its build pulled it: the
 * reference `runplane.toml` wrote and the manifest digest pulled.
 */
export async function recordImage(
  db: Kysely<Database>,
  options: { deploymentId: string; reference: string; digest: string },
): Promise<void> {
  await db
    .updateTable("deployments")
    .set({ image_reference: options.reference, image_digest: options.digest })
    .where("deployment_id", "=", options.deploymentId)
    .execute();
}

/**
 * Ends `owner`'s build: `ready` (and active, in the same transaction) or `failed` with `error`. False
 * when the build was no longer this owner's (its lease expired and another process failed it).
 */
export async function finishBuild(
  db: Kysely<Database>,
  options: { deployment: DeploymentRow; owner: string; now: number; error?: string },
): Promise<boolean> {
  const { deployment } = options;
  return await db.transaction().execute(async (tx) => {
    const result = await tx
      .updateTable("deployments")
      .set({
        status: options.error === undefined ? "ready" : "failed",
        error: options.error ?? null,
        finished_at: options.now,
        lease_owner: null,
        lease_expires_at: null,
      })
      .where("deployment_id", "=", deployment.deployment_id)
      .where("lease_owner", "=", options.owner)
      .where("status", "=", "building")
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) === 0) return false;
    if (options.error === undefined) {
      await tx
        .updateTable("apps")
        .set({ active_deployment_id: deployment.deployment_id })
        .where("project_id", "=", deployment.project_id)
        .where("app_id", "=", deployment.app_id)
        .execute();
    }
    return true;
  });
}

/** Fails the builds whose process stopped renewing their lease; returns how many. */
export async function failAbandonedBuilds(db: Kysely<Database>, now: number): Promise<number> {
  const result = await db
    .updateTable("deployments")
    .set({
      status: "failed",
      error: "The process building it stopped before the build ended; deploy again",
      finished_at: now,
      lease_owner: null,
      lease_expires_at: null,
    })
    .where("status", "=", "building")
    .where("lease_expires_at", "<", now)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** One build log line as stored. */
export interface LogLine {
  seq: number;
  at: number;
  stream: string;
  line: string;
}

/** Appends log lines (their `seq` numbers given by the one writer of the build). */
export async function insertLogLines(
  db: Kysely<Database>,
  deploymentId: string,
  lines: LogLine[],
): Promise<void> {
  if (lines.length === 0) return;
  await db.insertInto("deployment_logs").values(lines.map((l) => ({ deployment_id: deploymentId, ...l }))).execute();
}

/** A build's log lines after `afterSeq`, in order, at most `limit`. */
export function selectLogLines(
  db: Kysely<Database>,
  options: { deploymentId: string; afterSeq: number; limit: number },
): Promise<LogLine[]> {
  return db
    .selectFrom("deployment_logs")
    .select(["seq", "at", "stream", "line"])
    .where("deployment_id", "=", options.deploymentId)
    .where("seq", ">", options.afterSeq)
    .orderBy("seq")
    .limit(options.limit)
    .execute();
}

/** The newest deployment of each of a project's apps (for an app's state while it has no active one). */
export async function selectNewestDeployments(
  db: Kysely<Database>,
  projectId: string,
): Promise<Map<string, DeploymentRow>> {
  const rows = await db
    .selectFrom("deployments")
    .selectAll()
    .where("project_id", "=", projectId)
    .where(
      "deployment_id",
      "in",
      (eb) =>
        eb.selectFrom("deployments").select((e) => e.fn.max("deployment_id").as("newest"))
          .where("project_id", "=", projectId).groupBy("app_id"),
    )
    .execute();
  return new Map(rows.map((r) => [r.app_id, r]));
}
