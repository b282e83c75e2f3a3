/** Which repository provider each project uses, kept in the store with the GitHub token sealed. */
import type { Kysely } from "kysely";
import type { SecretBox } from "../secrets/mod.ts";
import { ensureProject } from "../store/mod.ts";
import type { Database } from "../store/schema.ts";
import { GITHUB_API_URL } from "./_github.ts";

/** A project's provider: the local git folder (the default) or GitHub with a token. */
export type ProjectIntegration =
  | { provider: "local" }
  | { provider: "github"; apiUrl: string; token: string };

/** Where integrations are kept and how their secrets are sealed. */
export interface IntegrationStore {
  db: Kysely<Database>;
  secrets: SecretBox;
}

/**
 * Checks a GitHub API base URL (`https://api.github.com`, or `https://<host>/api/v3` for GitHub
 * Enterprise Server) and returns it without a trailing slash; throws an Error saying what is wrong.
 */
export function normalizeGithubApiUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(
      `The GitHub API URL "${raw}" is not a URL: use e.g. ${GITHUB_API_URL} or https://github.example.com/api/v3`,
    );
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new Error(`The GitHub API URL must use https (or http), not ${url.protocol}`);
  }
  if (url.username || url.password || url.search || url.hash) {
    throw new Error("The GitHub API URL must not hold credentials, a query or a fragment: pass the token with --token");
  }
  return url.href.replace(/\/+$/, "");
}

/** The project's provider; `local` when none was configured. Throws when the sealed token cannot be opened. */
export async function loadProjectIntegration(store: IntegrationStore, projectId: string): Promise<ProjectIntegration> {
  const row = await store.db.selectFrom("project_integrations").selectAll().where("project_id", "=", projectId)
    .executeTakeFirst();
  if (!row || row.provider !== "github" || !row.github_token_sealed) return { provider: "local" };
  return {
    provider: "github",
    apiUrl: row.github_api_url ?? GITHUB_API_URL,
    token: store.secrets.open(row.github_token_sealed),
  };
}

/** Sets the project's provider (creating the project if needed); a GitHub token is sealed before it is stored. */
export async function saveProjectIntegration(
  store: IntegrationStore,
  options: { projectId: string; integration: ProjectIntegration },
): Promise<void> {
  const { projectId, integration } = options;
  await ensureProject(store.db, projectId);
  const values = integration.provider === "github"
    ? {
      provider: "github" as const,
      github_api_url: normalizeGithubApiUrl(integration.apiUrl),
      github_token_sealed: store.secrets.seal(integration.token),
    }
    : { provider: "local" as const, github_api_url: null, github_token_sealed: null };
  const updatedAt = Date.now();
  await store.db
    .insertInto("project_integrations")
    .values({ project_id: projectId, ...values, updated_at: updatedAt })
    .onConflict((oc) => oc.column("project_id").doUpdateSet({ ...values, updated_at: updatedAt }))
    .execute();
}
