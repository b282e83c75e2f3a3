/** Build support: the canonical base-image digest and the record of digests a project has seen. */
import type { Kysely } from "kysely";
import { ensureProject, isForeignKeyViolation } from "../store/mod.ts";
import type { Database } from "../store/schema.ts";
import { baseImageDigest, type BaseImageRequest, canonicalBaseImage } from "./base_image_hash.ts";

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

/** The digest, and what a build of it will do with its virtualenv. */
export interface BaseImageHashOutcome {
  digest: string;
  /** `new`: pip will make the virtualenv; `cached`: a ready one is reused, or none is needed (no pip requirements). */
  status: "new" | "cached";
}

/** What `hashBaseImage` asks of the builds. */
export interface HashBaseImageOptions {
  /** Whether a build of `digest` would reuse a ready virtualenv (rather than run pip). */
  dependencyLayerReady(digest: string): Promise<boolean>;
}

/**
 * Computes the digest of `request`, records it among the project's digests, and says what a build of it
 * will do: `new` when it has pip requirements and no ready virtualenv of the digest, `cached` otherwise.
 * Throws a 400 problem for a bad Base64 command.
 */
export async function hashBaseImage(
  db: Kysely<Database>,
  input: { projectId: string; request: BaseImageRequest },
  options: HashBaseImageOptions,
): Promise<BaseImageHashOutcome> {
  const canonical = canonicalBaseImage(input.request);
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
  const reused = canonical.pipRequirements.length === 0 || await options.dependencyLayerReady(digest);
  return { digest, status: reused ? "cached" : "new" };
}
