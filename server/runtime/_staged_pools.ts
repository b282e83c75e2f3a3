/**
 * Versions started before they serve (issue 44): a deployment's build is ready only once one of its
 * replicas imported main.py (or its custom server answered), so its pool is started while the previous
 * version still serves. The reload that then serves the deployment takes the pool over, warm replica and
 * template included, instead of starting them a second time.
 */
import type { AppVersion } from "./_app_registry.ts";
import type { Replica, ReplicaPool } from "./_replica_pool.ts";

/** What a staged pool was started with: taken over only by a version made of the same. */
export interface StagedKey {
  version: AppVersion;
  /** The fingerprint of the project's secrets it was started with. */
  secrets: string;
}

/** The pools started for deployments not served yet, by deployment id. */
export class StagedPools<R extends Replica> {
  readonly #pools = new Map<string, StagedKey & { pool: ReplicaPool<R> }>();

  /** Keeps `pool` for `key`'s deployment (stopping one staged for it before); returns what releases it. */
  add(key: StagedKey, pool: ReplicaPool<R>): () => Promise<void> {
    const id = key.version.deploymentId!;
    void this.#pools.get(id)?.pool.close();
    this.#pools.set(id, { ...key, pool });
    return async () => {
      if (this.#pools.get(id)?.pool !== pool) return;
      this.#pools.delete(id);
      await pool.close();
    };
  }

  /**
   * The pool staged for `key`'s deployment, now the caller's; undefined when none was, or when it was
   * started with something else (another build of the same id cannot be, but the project's secrets can
   * have changed since): that one is stopped.
   */
  take(key: StagedKey): ReplicaPool<R> | undefined {
    const id = key.version.deploymentId;
    const found = id === undefined ? undefined : this.#pools.get(id);
    if (!found) return undefined;
    this.#pools.delete(id!);
    if (key.version.config && found.version.fingerprint === key.version.fingerprint && found.secrets === key.secrets) {
      return found.pool;
    }
    void found.pool.close();
    return undefined;
  }

  /** Every staged pool, removed (the runtime closes them). */
  drain(): ReplicaPool<R>[] {
    const pools = [...this.#pools.values()].map((found) => found.pool);
    this.#pools.clear();
    return pools;
  }
}
