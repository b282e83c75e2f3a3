/**
 * Project secrets: environment variables a project's replicas get and nothing else does (not builds,
 * not other projects, not logs, not API answers). Each value is sealed with the secret box together
 * with its project and name, so a sealed value copied to another row does not open there. Every change
 * raises the project's version and announces the project on the `runplane_project_secrets` channel
 * (every process on PostgreSQL); free of HTTP, so the runtime, the handlers and tests share it.
 */
import type { Kysely } from "kysely";
import { ProblemError } from "../problems/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";
import type { Database, Notifier } from "../store/mod.ts";
import {
  deleteSecret,
  raiseVersion,
  secretExists,
  selectSealed,
  selectSecrets,
  selectSizes,
  selectVersion,
  upsertSecret,
} from "./_records.ts";
import { SecretChanges } from "./_secret_changes.ts";
import { checkName, checkValue, nameRefusal, PROJECT_SECRET_LIMITS, secretNameProblem } from "./_secret_checks.ts";
import { SecretSeals } from "./_secret_seals.ts";

export { PROJECT_SECRET_LIMITS, secretNameProblem } from "./_secret_checks.ts";
export { cacheReplicaEnvironments, type ReplicaEnvironment, type ReplicaEnvironments } from "./replica_environments.ts";

/** A secret as listed: its name and times (ISO 8601), never its value. */
export interface ProjectSecretInfo {
  name: string;
  createdAt: string;
  updatedAt: string;
}

/** The project secrets service. */
export interface ProjectSecrets {
  /** The project's secrets, by name, with when each was made and last set; never a value. */
  list(projectId: string): Promise<ProjectSecretInfo[]>;
  /**
   * Sets a secret (made, or its value replaced). Throws a `ProblemError`: 400 `validation` for a name
   * that `secretNameProblem` refuses (not an environment variable's, or one `[env]` may not set either),
   * or a value holding NUL or one `[env]` refuses to that name (a locale name holding `/`); 413 for a value
   * over `PROJECT_SECRET_LIMITS.valueBytes` or a project total over `totalBytes`; 409 for a secret past
   * `secrets`.
   */
  put(projectId: string, name: string, value: string): Promise<{ created: boolean; secret: ProjectSecretInfo }>;
  /**
   * Removes a secret; false when the project has none by that name. A refused name is a 400 unless the
   * project has a secret by it (set before the name was refused), which can always be removed.
   */
  delete(projectId: string, name: string): Promise<boolean>;
  /**
   * The project's secrets as environment variables (unsealed), for its replicas only, less any whose
   * name or value is refused now (set before it was; `list` still shows it, so that it can be deleted or
   * set again). Read `fingerprint` before it, so a change in between makes the fingerprint older, never
   * newer, than the values. Throws when a value does not open (another data key, an altered or moved row),
   * naming the secret.
   */
  environment(projectId: string): Promise<Record<string, string>>;
  /** A string that changes whenever the project's secrets change (the project's version). */
  fingerprint(projectId: string): Promise<string>;
  /**
   * Calls `listener` with the project's id when its secrets change, in this process or (PostgreSQL) any
   * other; returns the function that stops it. After the store's listening connection was lost and is
   * back, every project whose secrets ever changed is told (changes may have been missed): compare
   * `fingerprint` to skip a project whose replicas already have its version.
   */
  onChange(listener: (projectId: string) => void): () => void;
}

/** Options of `createProjectSecrets`. */
export interface ProjectSecretsOptions {
  db: Kysely<Database>;
  /** Seals and opens the values (the data dir's, or the shared data key on PostgreSQL). */
  secrets: SecretBox;
  /** Announces changes to every process sharing the store. */
  notifier: Notifier;
  /** The store's clock (Unix ms). */
  now(): number;
  /** A listener that threw, or projects that could not be read after a lost connection. */
  onError?(error: unknown): void;
}

/** Thrown inside a transaction to roll it back without an error reaching the caller. */
class NothingToDo extends Error {}

function iso(ms: number): string {
  return new Date(Number(ms)).toISOString();
}

/** Creates the project secrets service over the store. */
export function createProjectSecrets(options: ProjectSecretsOptions): ProjectSecrets {
  const { db } = options;
  const seals = new SecretSeals(options.secrets);
  const changes = new SecretChanges(options);

  return {
    async list(projectId) {
      const rows = await selectSecrets(db, projectId);
      return rows.map((row) => ({ name: row.name, createdAt: iso(row.created_at), updatedAt: iso(row.updated_at) }));
    },

    async put(projectId, name, value) {
      checkName(name);
      const bytes = checkValue(name, value);
      const sealed = seals.seal(projectId, { name, value });
      const now = options.now();
      const outcome = await db.transaction().execute(async (tx) => {
        await raiseVersion(tx, projectId, now);
        const sizes = await selectSizes(tx, projectId);
        const created = !sizes.some((s) => s.name === name);
        if (created && sizes.length >= PROJECT_SECRET_LIMITS.secrets) {
          throw new ProblemError(
            "conflict",
            `Project ${projectId} has ${sizes.length} secrets; the limit is ${PROJECT_SECRET_LIMITS.secrets} per project: delete one first`,
          );
        }
        const total = sizes.reduce((sum, s) => sum + (s.name === name ? 0 : s.value_bytes), bytes);
        if (total > PROJECT_SECRET_LIMITS.totalBytes) {
          throw new ProblemError(
            "content-too-large",
            `Project ${projectId}'s secret values would total ${total} bytes; the limit is ${PROJECT_SECRET_LIMITS.totalBytes} bytes (1 MiB) per project`,
          );
        }
        const createdAt = await upsertSecret(tx, { projectId, name, sealed, bytes, now });
        await changes.announce(tx, projectId);
        return { created, secret: { name, createdAt: iso(createdAt), updatedAt: iso(now) } };
      });
      changes.tell(projectId);
      return outcome;
    },

    async delete(projectId, name) {
      const problem = secretNameProblem(name);
      const exists = await secretExists(db, { projectId, name });
      // A secret set before its name was refused must still be removable; a name no secret has is a 400.
      if (problem && !exists) throw nameRefusal(name, problem);
      if (!exists) return false;
      try {
        await db.transaction().execute(async (tx) => {
          await raiseVersion(tx, projectId, options.now());
          // Deleted meanwhile by another call: roll the version back, nothing changed.
          if (!(await deleteSecret(tx, { projectId, name }))) throw new NothingToDo();
          await changes.announce(tx, projectId);
        });
      } catch (error) {
        if (error instanceof NothingToDo) return false;
        throw error;
      }
      changes.tell(projectId);
      return true;
    },

    async environment(projectId) {
      const rows = await selectSealed(db, projectId);
      // A name or value refused since its secret was set never reaches a replica, nor the root processes
      // that start it. A value is sealed, so it is checked once opened.
      const allowed = rows.filter((row) => secretNameProblem(row.name) === null);
      const variables = allowed.map((row) => [row.name, seals.open(projectId, row)] as const);
      return Object.fromEntries(variables.filter(([name, value]) => secretNameProblem(name, value) === null));
    },

    async fingerprint(projectId) {
      return `v${await selectVersion(db, projectId)}`;
    },

    onChange(listener) {
      return changes.onChange(listener);
    },
  };
}
