/**
 * Changes of project secrets told to their listeners: this process's at once, other processes' through
 * the `runplane_project_secrets` channel (PostgreSQL), and every project that has had a change after the
 * store's listening connection was lost.
 */
import { randomBytes } from "node:crypto";
import type { Kysely, Transaction } from "kysely";
import type { Database, Notifier } from "../store/mod.ts";
import { selectVersionedProjects } from "./_records.ts";

const CHANNEL = "runplane_project_secrets";

/** What `SecretChanges` needs. */
export interface SecretChangesOptions {
  db: Kysely<Database>;
  notifier: Notifier;
  /** A listener that threw, or projects that could not be read after a lost connection. */
  onError?(error: unknown): void;
}

/** The listeners of one project secrets service, and its announcements. */
export class SecretChanges {
  readonly #options: SecretChangesOptions;
  // Marks this instance's announcements: its own listeners are told at once, not again by the echo.
  readonly #origin = randomBytes(6).toString("hex");
  readonly #listeners = new Set<(projectId: string) => void>();
  #stopListening: (() => void) | undefined;
  // One listener on the channel, however often it is listened to again.
  readonly #onWake = (payload: string | undefined) => this.#woken(payload);

  constructor(options: SecretChangesOptions) {
    this.#options = options;
  }

  /** Announces, inside the transaction `tx` that changes them, that the project's secrets change. */
  async announce(tx: Transaction<Database>, projectId: string): Promise<void> {
    await this.#options.notifier.notify(CHANNEL, `${this.#origin} ${projectId}`, { db: tx });
  }

  /** Tells this process's listeners that the project's secrets changed. */
  tell(projectId: string): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener(projectId);
      } catch (error) {
        this.#options.onError?.(error);
      }
    }
  }

  #woken(payload: string | undefined): void {
    if (payload === undefined) {
      // Changes may have been missed while the connection was away: tell every project that has had any.
      selectVersionedProjects(this.#options.db).then(
        (projects) => projects.forEach((projectId) => this.tell(projectId)),
        (error) => this.#options.onError?.(error),
      );
      return;
    }
    const [from, projectId] = payload.split(" ");
    if (from !== this.#origin && projectId) this.tell(projectId);
  }

  /** Calls `listener` with the project's id when its secrets change; returns the function that stops it. */
  onChange(listener: (projectId: string) => void): () => void {
    // A fresh function per call, so the same listener added twice is removed once per unsubscribe.
    const entry = (projectId: string) => listener(projectId);
    this.#listeners.add(entry);
    this.#stopListening ??= this.#options.notifier.listen(CHANNEL, this.#onWake);
    return () => {
      this.#listeners.delete(entry);
      if (this.#listeners.size === 0 && this.#stopListening) {
        this.#stopListening();
        this.#stopListening = undefined;
      }
    };
  }
}
