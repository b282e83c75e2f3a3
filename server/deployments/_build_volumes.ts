/**
 * A deployment's `[volumes]` at build time (issue 48): each must name a volume its project has, or the
 * build fails saying which (the deployment is never Ready); with `[build] volumes = true` the project's own
 * build commands (pre-build and shell commands, which see the bundle) are shown them as replicas are.
 * Steps whose result is shared between projects (a virtualenv, an image layer) never are.
 */
import type { AppConfig } from "../runtime/mod.ts";
import type { JailMount } from "../sandbox/mod.ts";

/** What a build needs of the project volumes service. */
export interface BuildVolumes {
  /** The project's volume, or undefined when it has none of that name. */
  get(projectId: string, name: string): Promise<unknown>;
  /** The folder of its files on this host, mounted when needed. */
  mountedFiles(projectId: string, name: string): Promise<string>;
}

/** A build refused for its volumes: the deployment's error. */
export class VolumeBuildError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "VolumeBuildError";
  }
}

/**
 * Checks that every volume `config` mounts is one of `projectId`'s and returns the mounts of its build
 * commands: none unless `[build] volumes = true`. Throws a `VolumeBuildError` naming the key.
 */
export async function buildVolumeMounts(
  config: AppConfig,
  options: { projectId: string; volumes?: BuildVolumes },
): Promise<JailMount[]> {
  const { projectId, volumes } = options;
  if (!config.volumes.length) return [];
  if (!volumes) {
    throw new VolumeBuildError("runplane.toml: [volumes] is set, and this server serves no project volumes");
  }
  for (const mount of config.volumes) {
    if ((await volumes.get(projectId, mount.volume)) === undefined) {
      throw new VolumeBuildError(
        `runplane.toml: volumes.${mount.name} names volume ${
          JSON.stringify(mount.volume)
        }, which project ${projectId} does not have; create it first (runplane volumes create) or fix the name`,
      );
    }
  }
  if (!config.build.volumes) return [];
  const mounts: JailMount[] = [];
  for (const mount of config.volumes) {
    const source = await volumes.mountedFiles(projectId, mount.volume);
    mounts.push({ source, target: mount.path, readOnly: mount.readOnly });
  }
  return mounts;
}
