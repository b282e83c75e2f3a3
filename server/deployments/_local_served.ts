/**
 * What this process serves of the store's deployed apps (see _local_apps.ts): the apps it serves, those
 * no deployment serves, the apps adopted ahead of the store, and the reload that tells the runtime and
 * `served_by` once that changed.
 */
import type { DeployedApp, UnservedApp } from "../runtime/mod.ts";
import type { DeploymentRow } from "./_records.ts";
import type { ServedApp } from "./_served_reporter.ts";

/** An adopted app: the store's answers are ignored for it, up to the read numbered `releasedAfterRead`. */
export interface Pin {
  deploymentId: string;
  releasedAfterRead?: number;
}

/** One app served here, since when (the store's clock). */
export interface ServedHereApp {
  app: DeployedApp;
  since: number;
}

/** Options of `LocalServed`. */
export interface LocalServedOptions {
  /** Called after the set of served deployments changed (the runtime reloads). */
  onChange(): Promise<void>;
  /** Called after `onChange` with everything served here. */
  onServed?(apps: ServedApp[]): Promise<void>;
}

/** `project/app` of a row. */
export function keyOf(row: DeploymentRow): string {
  return `${row.project_id}/${row.app_id}`;
}

/** The apps served here and not, by `project/app`, the pins of adopted apps and the numbered reads. */
export class LocalServed {
  /** The apps served here. */
  readonly served = new Map<string, ServedHereApp>();
  /** The deployed apps that no deployment serves. */
  readonly unserved = new Map<string, UnservedApp>();
  /** The adopted apps. */
  readonly pins = new Map<string, Pin>();
  /** Reads of the store are numbered as they begin: the number of the latest one. */
  reads = 0;
  /** Set once the follower stops: nothing changes after it. */
  stopped = false;
  readonly #options: LocalServedOptions;

  constructor(options: LocalServedOptions) {
    this.#options = options;
  }

  /** Whether the store's answer of the read numbered `read` is ignored for `key` (it is adopted). */
  pinned(key: string, read: number): boolean {
    const pin = this.pins.get(key);
    return pin !== undefined && (pin.releasedAfterRead === undefined || read <= pin.releasedAfterRead);
  }

  /** Tells the runtime the served deployments changed, then `served_by` everything served here. */
  async reload(): Promise<void> {
    await this.#options.onChange();
    const apps = [...this.served.values()].map(({ app, since }) => ({
      projectId: app.projectId,
      appId: app.name,
      deploymentId: app.version,
      since,
    }));
    await this.#options.onServed?.(apps);
  }
}
