/**
 * The environments replicas start with, read from the store once per change instead of at every reload
 * of the runtime: each project's secrets and their fingerprint, kept until `onChange` says they changed
 * (in this process, or in another one sharing PostgreSQL).
 */

/** What the cache reads of the project secrets service (`ProjectSecrets` has it). */
export interface SecretsSource {
  fingerprint(projectId: string): Promise<string>;
  environment(projectId: string): Promise<Record<string, string>>;
  onChange(listener: (projectId: string) => void): () => void;
}

/** A project's secrets as its replicas see them, and a fingerprint that changes with them. */
export interface ReplicaEnvironment {
  env: Record<string, string>;
  fingerprint: string;
}

/** The cached environments; `changed` is told each project whose secrets changed. */
export interface ReplicaEnvironments {
  get(projectId: string): Promise<ReplicaEnvironment>;
  close(): void;
}

/** Caches `secrets`' environments per project, dropping one when it changes and telling `changed`. */
export function cacheReplicaEnvironments(
  secrets: SecretsSource,
  options: { changed(projectId: string): void },
): ReplicaEnvironments {
  const cache = new Map<string, Promise<ReplicaEnvironment>>();
  const unsubscribe = secrets.onChange((projectId) => {
    cache.delete(projectId);
    options.changed(projectId);
  });
  async function read(projectId: string): Promise<ReplicaEnvironment> {
    // The fingerprint first: a change in between leaves it older than the values, so it is seen again.
    const fingerprint = await secrets.fingerprint(projectId);
    return { fingerprint, env: await secrets.environment(projectId) };
  }
  return {
    get(projectId) {
      let found = cache.get(projectId);
      if (!found) {
        found = read(projectId);
        cache.set(projectId, found);
        // A failed read (the store away) is tried again by the next caller.
        found.catch(() => cache.get(projectId) === found && cache.delete(projectId));
      }
      return found;
    },
    close: unsubscribe,
  };
}
