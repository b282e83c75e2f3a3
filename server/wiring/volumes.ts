/**
 * Project volumes as this host's replicas see them (issue 48): the volumes service's folders behind the
 * runtime's `ReplicaVolumes`, the apps in service that mount each volume (the 409 of a volume's DELETE),
 * and the check at start of what this host cannot see.
 */
import type { Logger } from "../log.ts";
import { type DeployedApp, parseAppConfig } from "../runtime/mod.ts";
import { HostVolumes, type VolumeUser } from "../volumes/host_volumes.ts";
import type { Volumes } from "../volumes/mod.ts";

/** This host's volumes for its replicas: found on disk first, then mounted by the volumes service. */
export function hostVolumesOf(volumes: Pick<Volumes, "dir" | "mode" | "mountedFiles">, logger: Logger): HostVolumes {
  return new HostVolumes({
    dir: volumes.dir,
    mode: volumes.mode,
    logger,
    mount: (projectId, volume) => volumes.mountedFiles(projectId, volume),
  });
}

/** The volumes each of `apps` mounts (a deployment's recorded `runplane.toml`; one that does not load mounts none). */
export function volumeUsers(apps: readonly DeployedApp[]): VolumeUser[] {
  const users: VolumeUser[] = [];
  for (const app of apps) {
    try {
      const config = parseAppConfig(app.configToml, app.dir, { allowExternalRuntimes: true, pipAllowUnpinned: true });
      const volumes = [...new Set(config.volumes.map((mount) => mount.volume))];
      if (volumes.length) users.push({ projectId: app.projectId, name: app.name, volumes });
    } catch {
      // Not served either: it mounts nothing.
    }
  }
  return users;
}

/** The app of `projectId` in service (its active deployment) that mounts `volume`, if any. */
export function appMounting(
  apps: readonly DeployedApp[],
  volume: { projectId: string; name: string },
): string | undefined {
  const projectApps = apps.filter((app) => app.projectId === volume.projectId);
  return volumeUsers(projectApps).find((user) => user.volumes.includes(volume.name))?.name;
}
