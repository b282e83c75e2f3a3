/** Build support: the canonical base-image digest and the record of digests a project has seen. */
import type { Kysely } from "kysely";
import { ensureProject, isForeignKeyViolation } from "../store/mod.ts";
import type { Database } from "../store/schema.ts";
import { baseImageDigest, type BaseImageRequest } from "./base_image_hash.ts";

export {
  BASE_IMAGE_ALGORITHM,
  baseImageDigest,
  type BaseImageRequest,
  canonicalBaseImage,
  canonicalJson,
  DEFAULT_BASE_IMAGE,
  normalizePipName,
  normalizePipRequirement,
} from "./base_image_hash.ts";

/** The digest and whether the project had seen it. */
export interface BaseImageHashOutcome {
  digest: string;
  status: "new" | "cached";
}

/**
 * Computes the digest of `request` and records it for the project: `new` the first time, `cached`
 * after. Throws a 400 problem for a bad Base64 command.
 */
export async function hashBaseImage(
  db: Kysely<Database>,
  input: { projectId: string; request: BaseImageRequest },
): Promise<BaseImageHashOutcome> {
  const digest = baseImageDigest(input.request);
  const insert = () =>
    db.insertInto("base_image_digests")
      .values({ project_id: input.projectId, digest, created_at: Date.now() })
      .onConflict((oc) =>
        oc.columns(["project_id", "digest"]).doUpdateSet((eb) => ({
          seen_count: eb("base_image_digests.seen_count", "+", 1),
        }))
      )
      .returning("seen_count")
      .executeTakeFirstOrThrow();
  let row;
  try {
    row = await insert();
  } catch (error) {
    // A token can name a project that only exists in its claims; create it and try again.
    if (!isForeignKeyViolation(error)) throw error;
    await ensureProject(db, input.projectId);
    row = await insert();
  }
  return { digest, status: row.seen_count === 1 ? "new" : "cached" };
}
