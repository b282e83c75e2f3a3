/**
 * The repository-tree service: picks the project's provider, resolves the ref, and reads the tree
 * once per commit through the bounded cache.
 */
import type { Logger } from "pino";
import { Counter, type Registry } from "prom-client";
import { archivePath } from "./_archive.ts";
import { createGithubProvider } from "./_github.ts";
import { createLocalGitProvider, projectReposDir } from "./_local_git.ts";
import { type IntegrationStore, loadProjectIntegration } from "./_project_integrations.ts";
import { assertRepoCoordinates } from "./_repo_names.ts";
import { createTreeCache } from "./_tree_cache.ts";
import { sortByPath, type TreeEntry, type TreeProvider } from "./_tree_types.ts";

/** Options of `createRepositoryTrees`. */
export interface RepositoryTreesOptions {
  /** The data dir; local repositories live in its `repos/<project_id>/` folder. */
  dataDir: string;
  store: IntegrationStore;
  logger: Logger;
  /** Where the cache counter `runplane_repository_tree_cache_total{result}` is registered. */
  metrics: Registry;
  /** The most paths the cache holds in all. */
  cacheEntries: number;
}

/** What a tree request names. */
export interface TreeRequest {
  owner: string;
  repo: string;
  /** A branch, tag or commit sha; the default branch when undefined. */
  ref?: string;
  signal?: AbortSignal;
}

/** A resolved tree: its commit and root tree are known; the entries are read (or taken from the cache) on demand. */
export interface ResolvedTree {
  ref: string;
  commit: string;
  /** The root tree's sha: the ETag. */
  tree: string;
  /** Every entry, sorted by path; the same array for every request of this commit while cached. */
  entries(): Promise<TreeEntry[]>;
}

/** The service handlers call. */
export interface RepositoryTrees {
  /** Resolves the tree `request` names in `projectId`'s provider; throws 400/404/502/503 problems. */
  resolve(projectId: string, request: TreeRequest): Promise<ResolvedTree>;
  /**
   * The folder `request.path` (the root when absent) of the resolved ref as a gzip tarball with the folder
   * at its root — a deploy bundle; throws 400/404/413/502/503 problems.
   */
  archive(
    projectId: string,
    request: TreeRequest & { path?: string; maxBytes: number },
  ): Promise<{ ref: string; commit: string; bytes: Uint8Array }>;
}

/** Creates the service. */
export function createRepositoryTrees(options: RepositoryTreesOptions): RepositoryTrees {
  const cache = createTreeCache(options.cacheEntries);
  const lookups = new Counter({
    name: "runplane_repository_tree_cache_total",
    help: "Repository tree reads by cache outcome (hit: served without reading git or calling GitHub)",
    labelNames: ["result"],
    registers: [options.metrics],
  });

  async function providerFor(projectId: string): Promise<TreeProvider> {
    const integration = await loadProjectIntegration(options.store, projectId);
    if (integration.provider === "github") {
      return createGithubProvider({ token: integration.token, apiUrl: integration.apiUrl });
    }
    return createLocalGitProvider(projectReposDir(options.dataDir, projectId));
  }

  return {
    async archive(projectId, request) {
      const coordinates = { owner: request.owner, repo: request.repo };
      assertRepoCoordinates(coordinates, request.ref);
      const path = archivePath(request.path);
      const provider = await providerFor(projectId);
      const resolved = await provider.resolve(coordinates, request.ref, { signal: request.signal });
      const bytes = await provider.archive(coordinates, resolved, {
        path,
        maxBytes: request.maxBytes,
        signal: request.signal,
      });
      return { ref: resolved.ref, commit: resolved.commit, bytes };
    },
    async resolve(projectId, request) {
      const coordinates = { owner: request.owner, repo: request.repo };
      assertRepoCoordinates(coordinates, request.ref);
      const provider = await providerFor(projectId);
      const resolved = await provider.resolve(coordinates, request.ref, { signal: request.signal });
      const key = [projectId, provider.source, request.owner, request.repo, resolved.commit].join("\0");
      return {
        ...resolved,
        async entries() {
          const startedAt = performance.now();
          // The read is not tied to the request's signal: a tree read to the end serves the next caller.
          const { entries, hit } = await cache.getOrLoad(
            key,
            async () => sortByPath(await provider.readTree(coordinates, resolved)),
          );
          lookups.inc({ result: hit ? "hit" : "miss" });
          options.logger.debug({
            project_id: projectId,
            owner: request.owner,
            repo: request.repo,
            commit: resolved.commit,
            source: provider.source,
            cache: hit ? "hit" : "miss",
            entries: entries.length,
            duration_ms: Math.round(performance.now() - startedAt),
          }, "repository tree");
          return entries;
        },
      };
    },
  };
}
