/**
 * The volumes this host shows replicas (issue 48): an app's `[volumes]` resolved to each volume's `files/`
 * folder here, mounted (`loop` mode) when it is not yet; and what this host cannot see: logged, shown in
 * `/readyz`, and the app that mounts it is not placed here (its calls get the problem naming the volume).
 */
import { lstatSync } from "node:fs";
import type { Logger } from "../log.ts";
import { volumePaths, type VolumesMode } from "./_volume_disk.ts";

/** How often `missing` looks again for a volume found missing. */
const RECHECK_MS = 10_000;

/** Options of `HostVolumes`. */
export interface HostVolumesOptions {
  /** RUNPLANE_VOLUMES_DIR (resolved: `<data dir>/volumes` when unset). */
  dir: string;
  mode: VolumesMode;
  logger: Logger;
  /**
   * Mounts (or makes sure of) a volume the project has, as the volumes service does (`mountedFiles`): it
   * rejects for a volume the project does not have. Called only once the volume was found on this host.
   */
  mount(projectId: string, volume: string): Promise<string>;
}

/** A volume that an app served here mounts and this host cannot see. */
export interface UnavailableVolume {
  projectId: string;
  volume: string;
  /** The apps of the project that mount it (as far as this host was told). */
  apps: string[];
  reason: string;
}

/** An app to check: its project, its name, the volumes its `[volumes]` name. */
export interface VolumeUser {
  projectId: string;
  name: string;
  volumes: string[];
}

/** Resolves, mounts and checks the project volumes of this host. */
export class HostVolumes {
  readonly #options: HostVolumesOptions;
  readonly #unavailable = new Map<string, UnavailableVolume>();
  /** When `missing` last looked again for each. */
  readonly #checked = new Map<string, number>();

  constructor(options: HostVolumesOptions) {
    this.#options = options;
  }

  /** The host folder shown for `volume` of `projectId`: its `files/` (the names were checked by the toml's rules). */
  source(projectId: string, volume: string): string {
    return volumePaths(this.#options.dir, { projectId, name: volume }).files;
  }

  /**
   * Makes sure `volume` of `projectId` is here and mounted; throws an error naming it when it is not (and
   * remembers that for `/readyz` until it is seen again). Only this project's folder is ever looked at.
   */
  async ready(projectId: string, volume: string, options: { app?: string } = {}): Promise<void> {
    const key = `${projectId}/${volume}`;
    try {
      await this.#mount(projectId, volume);
      this.#unavailable.delete(key);
    } catch (error) {
      const reason = (error as Error).message;
      const known = this.#unavailable.get(key);
      const apps = new Set([...known?.apps ?? [], ...(options.app ? [options.app] : [])]);
      this.#unavailable.set(key, { projectId, volume, apps: [...apps].sort(), reason });
      throw new Error(
        `volume ${JSON.stringify(volume)} of project ${projectId} cannot be seen on this host: ${reason}`,
      );
    }
  }

  /** Checks every volume `apps` mount (at start): each one this host cannot see is logged and remembered. */
  async check(apps: readonly VolumeUser[]): Promise<void> {
    for (const app of apps) {
      for (const volume of app.volumes) {
        try {
          await this.ready(app.projectId, volume, { app: app.name });
        } catch (error) {
          this.#options.logger.error(
            { err: error, project: app.projectId, app: app.name, volume, dir: this.#options.dir },
            "an app served here mounts a volume this host cannot see; its replicas are not placed here",
          );
        }
      }
    }
  }

  /**
   * Whether `volume` of `projectId` was found missing and not seen since: a host of a cluster places no
   * replica of an app that mounts it. Looked for again (in the background) at most every `RECHECK_MS`, so a
   * volume that appears (its shared folder mounted by the operator) is placed again.
   */
  missing(projectId: string, volume: string): boolean {
    const found = this.#unavailable.get(`${projectId}/${volume}`);
    if (!found) return false;
    const now = Date.now();
    if (now - (this.#checked.get(`${projectId}/${volume}`) ?? 0) >= RECHECK_MS) {
      this.#checked.set(`${projectId}/${volume}`, now);
      this.ready(projectId, volume).catch(() => undefined);
    }
    return true;
  }

  /** The volumes found missing (or unmountable) and not seen since, for `/readyz`. */
  unavailable(): UnavailableVolume[] {
    return [...this.#unavailable.values()];
  }

  async #mount(projectId: string, volume: string): Promise<void> {
    const { dir, mode } = this.#options;
    const paths = volumePaths(dir, { projectId, name: volume });
    // Never followed: the volume is the server's own file (or folder) under the volumes dir, or it is not here.
    const found = lstatSync(mode === "loop" ? paths.image : paths.root, { throwIfNoEntry: false });
    if (!found) {
      throw new Error(
        "it is not in this host's volumes folder (RUNPLANE_VOLUMES_DIR): on a cluster, share that folder between hosts",
      );
    }
    if (mode === "loop" ? !found.isFile() : !found.isDirectory()) {
      throw new Error(`what is there is not a volume of ${mode} mode (RUNPLANE_VOLUMES_MODE)`);
    }
    // Found, never made here: a host that does not see a volume must not answer with an empty new one.
    await this.#options.mount(projectId, volume);
  }
}
