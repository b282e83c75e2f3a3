/**
 * The app of each run id a client saw (started, listed, or named by a failed call), so that
 * `getRun(runId)`, `waitForRun(runId)` and `cancelRun(runId)` work without the app.
 */
import { type AppLocation, type AppRef, resolveAppRef } from "./app_ref.ts";

/** How many run ids (and their apps) a client remembers for `getRun(runId)`. */
export const MAX_KNOWN_RUNS = 10_000;

/** A call's arguments about one run: `(runId, options?)` or `(app, runId, options?)`. */
export type RunArguments<O extends object> = [first: AppRef, second?: string | O, third?: O];

/** One run and the options of a call about it, sorted out of its `RunArguments`. */
export interface RunTarget<O extends object> {
  app: AppRef;
  runId: string;
  options: O;
}

/**
 * The run ids a client saw and their apps, oldest first (a Map keeps insertion order), capped at
 * `MAX_KNOWN_RUNS` so that a long-lived service does not grow it without bound.
 */
export class KnownRuns {
  readonly #apps = new Map<string, AppLocation>();

  /** Remembers that `runId` (when there is one) belongs to `app`, as the newest id. */
  remember(runId: string | undefined, app: AppRef): void {
    if (!runId) return;
    const { project, app: name } = resolveAppRef(app);
    this.#apps.delete(runId);
    this.#apps.set(runId, { project, app: name });
    if (this.#apps.size > MAX_KNOWN_RUNS) this.#apps.delete(this.#apps.keys().next().value!);
  }

  /**
   * Sorts the arguments of `method` out: `(runId, options?)` takes the app this client remembers,
   * `(app, runId, options?)` the one given. Throws a `TypeError` that names the call to write instead
   * when the run id is missing or its app unknown.
   */
  target<O extends object>(method: string, [first, second, third]: RunArguments<O>): RunTarget<O> {
    if (typeof second === "string") return { app: first, runId: second, options: third ?? ({} as O) };
    if (typeof first !== "string") {
      throw new TypeError(`${method} needs the run id: ${method}(runId) or ${method}(app, runId)`);
    }
    const app = this.#apps.get(first);
    if (!app) {
      throw new TypeError(
        `This client did not start run ${first}, so it does not know its app: call ${method}("<project>/<app>", "${first}")`,
      );
    }
    return { app: app as AppRef, runId: first, options: second ?? ({} as O) };
  }
}
