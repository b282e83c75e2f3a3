/**
 * A project secret's value sealed with the secret box together with its project and name, so that a
 * sealed value copied to another row does not open there.
 */
import type { SecretBox } from "../secrets/mod.ts";

/** A secret's row as read to open it. */
export interface SealedSecret {
  name: string;
  value_sealed: string;
}

/** Seals and opens project secrets' values. */
export class SecretSeals {
  readonly #secrets: SecretBox;

  constructor(secrets: SecretBox) {
    this.#secrets = secrets;
  }

  /** `secret`'s value sealed for its project and name. */
  seal(projectId: string, secret: { name: string; value: string }): string {
    return this.#secrets.seal(JSON.stringify([projectId, secret.name, secret.value]));
  }

  /** The value of `row`; throws, naming the secret, when it does not open or was sealed for another. */
  open(projectId: string, row: SealedSecret): string {
    let parts: unknown;
    try {
      parts = JSON.parse(this.#secrets.open(row.value_sealed));
    } catch (error) {
      throw new Error(
        `The secret ${row.name} of project ${projectId} does not open with this store's data key: set it again`,
        { cause: error },
      );
    }
    if (!Array.isArray(parts) || parts[0] !== projectId || parts[1] !== row.name || typeof parts[2] !== "string") {
      throw new Error(`The secret ${row.name} of project ${projectId} was sealed for another secret: set it again`);
    }
    return parts[2];
  }
}
