/**
 * Which projects the run-change feed sends the changes of: those followed by a page here, and those
 * another process said on `runplane_run_watch` it follows, until `watchTtlMs` after the last word; and
 * every project until the answers to this process's question (`?`) are in.
 */
import type { Logger } from "../log.ts";
import type { Notifier } from "../store/mod.ts";

/** The word on `runplane_run_watch` that asks which projects are followed (never a project's id). */
const ASK = "?";

/** What `WatchedProjects` needs. */
export interface WatchedProjectsOptions {
  notifier: Pick<Notifier, "notify" | "listen" | "listening">;
  logger: Logger;
  /** How long a project stays watched after the last word of it. */
  watchTtlMs: number;
  /** How long a process that asked sends every project's changes. */
  settleMs: number;
  /** The projects followed by a page here (by project id). */
  followedHere: ReadonlyMap<string, unknown>;
}

/** Which projects are followed, here and elsewhere, and the words said about them. */
export class WatchedProjects {
  readonly #options: WatchedProjectsOptions;
  // Projects followed by a page in some process (this one's included), until when.
  readonly #watchedUntil = new Map<string, number>();
  // Until when every project counts as watched: what is watched elsewhere is not known yet.
  #everythingUntil = 0;

  constructor(options: WatchedProjectsOptions) {
    this.#options = options;
  }

  /**
   * Listens to the words on `runplane_run_watch`, and asks once listening (sending everything until
   * then); returns the function that stops listening.
   */
  listen(): () => void {
    const { notifier } = this.#options;
    const stopWatchListening = notifier.listen("runplane_run_watch", (word) => {
      if (word === undefined) this.ask(); // back after a lost connection: words may have been missed
      else if (word === ASK) { for (const projectId of this.#options.followedHere.keys()) this.say(projectId); }
      else this.#watchedUntil.set(word, performance.now() + this.#options.watchTtlMs);
    });
    // A word said before this process listens never reaches it (a page opened elsewhere meanwhile, the
    // answers to its question): it sends everything until it listens, and only then asks. CI once had a
    // just-started process miss a page's word this way and send none of a run's changes.
    this.#everythingUntil = Infinity;
    void notifier.listening().then(() => this.ask());
    return stopWatchListening;
  }

  /** Says `word` on `runplane_run_watch`; a word lost only delays what it tells until the next one. */
  say(word: string): void {
    this.#options.notifier.notify("runplane_run_watch", word).catch((error) =>
      this.#options.logger.warn({ err: error, word }, "a word on which projects are followed was not sent")
    );
  }

  /** Asks every process which projects it follows, and sends everything until the answers are in. */
  ask(): void {
    this.#everythingUntil = performance.now() + this.#options.settleMs;
    this.say(ASK);
  }

  /** Whether the changes of `projectId`'s runs are sent now. */
  watched(projectId: string): boolean {
    const now = performance.now();
    // A page open here is followed whether or not this process's own word came back.
    if (now < this.#everythingUntil || this.#options.followedHere.has(projectId)) return true;
    const until = this.#watchedUntil.get(projectId);
    if (until === undefined) return false;
    if (until > now) return true;
    this.#watchedUntil.delete(projectId);
    return false;
  }
}
