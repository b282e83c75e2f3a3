/**
 * The store's tables, as Kysely sees them. Times are Unix milliseconds (integers) so that the same
 * queries run on SQLite and PostgreSQL.
 */
import type { Generated } from "kysely";

/** A project: the unit that owns apps, service accounts and digests. */
export interface ProjectTable {
  id: string;
  created_at: number;
}

/** A service account: the token is never stored, only its id (`jti`) and its claims. */
export interface ServiceAccountTable {
  id: string;
  project_id: string;
  name: string;
  /** Space-separated scopes: `rest`, `run`. */
  scopes: string;
  token_id: string;
  created_at: number;
  expires_at: number;
  revoked_at: number | null;
}

/** A base-image digest a project has seen. */
export interface BaseImageDigestTable {
  project_id: string;
  digest: string;
  created_at: number;
  seen_count: Generated<number>;
}

/** A project's repository provider; a project without a row uses the local git folder. */
export interface ProjectIntegrationTable {
  project_id: string;
  provider: "local" | "github";
  github_api_url: string | null;
  /** The GitHub token sealed by the SecretBox; never the plaintext. */
  github_token_sealed: string | null;
  updated_at: number;
}

/** Every table of the store. */
export interface Database {
  projects: ProjectTable;
  service_accounts: ServiceAccountTable;
  base_image_digests: BaseImageDigestTable;
  project_integrations: ProjectIntegrationTable;
}
