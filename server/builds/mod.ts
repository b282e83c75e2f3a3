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

/** The digest, and what a build of it will do. */
export interface BaseImageHashOutcome {
  digest: string;
  /** `new`: a layer will be built or pulled; `cached`: every layer it needs is ready here. */
  status: "new" | "cached";
}

/** What `hashBaseImage` asks of the builds. */
export interface HashBaseImageOptions {
  /** Whether a build of `request` (whose digest is `digest`) would build nothing: every layer is ready here. */
  layersReady(request: BaseImageRequest, options: { digest: string }): Promise<boolean>;
}

/**
 * Computes the digest of `request`, records it among the project's digests, and says what a build of it
 * will do: `cached` when every layer it needs is ready here, `new` otherwise.
 * Throws a 400 problem for a bad Base64 command.
 */
export async function hashBaseImage(
  db: Kysely<Database>,
  input: { projectId: string; request: BaseImageRequest },
  options: HashBaseImageOptions,
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
  try {
    await insert();
  } catch (error) {
    // A token can name a project that only exists in its claims; create it and try again.
    if (!isForeignKeyViolation(error)) throw error;
    await ensureProject(db, input.projectId);
    await insert();
  }
  const reused = await options.layersReady(input.request, { digest });
  return { digest, status: reused ? "cached" : "new" };
}
