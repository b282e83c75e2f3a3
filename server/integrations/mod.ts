/**
 * Source-repository integrations: a repository's file tree from the project's provider (the local git
 * folder by default, or GitHub), cached by commit, and the helpers the CLI uses to configure them.
 */
export { createGithubProvider, GITHUB_API_URL, type GithubProviderOptions } from "./_github.ts";
export { createLocalGitProvider, projectReposDir } from "./_local_git.ts";
export { mirrorRepository, type MirrorOptions, syncRepository, type SyncOutcome } from "./_mirror.ts";
export {
  type IntegrationStore,
  loadProjectIntegration,
  normalizeGithubApiUrl,
  type ProjectIntegration,
  saveProjectIntegration,
} from "./_project_integrations.ts";
export { assertRepoCoordinates, isPlainRef, OWNER_PATTERN, REPO_PATTERN } from "./_repo_names.ts";
export {
  createRepositoryTrees,
  type RepositoryTrees,
  type RepositoryTreesOptions,
  type ResolvedTree,
  type TreeRequest,
} from "./_repository_trees.ts";
export { createTreeCache, type CachedTree, type TreeCache } from "./_tree_cache.ts";
export type { RepoCoordinates, ResolvedRef, TreeEntry, TreeEntryType, TreeProvider } from "./_tree_types.ts";
