/**
 * What a runtime tells of its apps and its host: an app's settings, every app with its replicas and GPUs,
 * replicas by state, replicas waiting for room, the host's budget.
 */
import { label } from "./_app_pool.ts";
import { slotsPerReplica } from "./_batch_config.ts";
import type { HardwareNeed } from "./_host_budget.ts";
import type { LiveApps } from "./_live_apps.ts";
import type { ReplicaGpus, ReplicaStates } from "./_replica_pool.ts";
import type { AppInfo, AppSettings } from "./_types.ts";

/** The app's runtime and limits; throws like `invoke` for a missing or broken app. */
export function appSettings(apps: LiveApps, ref: { projectId: string; app: string }): AppSettings {
  const { config } = apps.live(ref.projectId, ref.app).version;
  return {
    runtime: config.runtime,
    responseGracePeriodMs: config.responseGracePeriodMs,
    maxReplicas: config.maxReplicas,
    replicaConcurrency: slotsPerReplica(config),
  };
}

/** Every app (of `projectId`, if given) with its replicas (`replicaStates`, by app) and GPUs, sorted by name. */
export function appInfos(
  apps: LiveApps,
  options: { projectId?: string; replicaStates: Array<{ app: string } & ReplicaStates> },
): AppInfo[] {
  const { projectId } = options;
  const states = new Map(options.replicaStates.map(({ app, ...rest }) => [app, rest]));
  const gpus = new Map<string, ReplicaGpus[]>();
  for (const pool of apps.livePools()) gpus.set(pool.label, [...(gpus.get(pool.label) ?? []), ...pool.gpus()]);
  return [...apps.apps.values()]
    .filter((live) => projectId === undefined || live.version.projectId === projectId)
    .map(({ version }) => ({
      projectId: version.projectId,
      name: version.name,
      source: version.source,
      config: version.config,
      error: version.error,
      replicas: states.get(label(version)) ?? { starting: 0, idle: 0, busy: 0 },
      gpus: gpus.get(label(version)) ?? [],
    }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The host's budget and what live replicas reserve of it. */
export function hostCapacity(
  apps: LiveApps,
): { total: HardwareNeed; reserved: HardwareNeed; gpus: { total: number; held: number } } {
  const { total, reserved, gpus } = apps.options.budget;
  return { total, reserved, gpus: { total: gpus.gpus.length, held: gpus.held } };
}

/** Per app, replicas it would start now but the host has no room for. */
export function waitingForCapacity(apps: LiveApps): Array<{ app: string; replicas: number }> {
  return apps.livePools().map((pool) => ({ app: pool.label, replicas: pool.capacity().waitingForCapacity }))
    .filter((entry) => entry.replicas > 0);
}

/** Replicas per app by state, retired versions still finishing calls included. */
export function replicaStates(apps: LiveApps): Array<{ app: string } & ReplicaStates> {
  const byApp = new Map<string, ReplicaStates>();
  const pools = [
    ...[...apps.apps.values()].flatMap((a) => (a.pool ? [[label(a.version), a.pool] as const] : [])),
    ...[...apps.retired].map((p) => [p.label, p] as const),
  ];
  for (const [app, pool] of pools) {
    const total = byApp.get(app) ?? { starting: 0, idle: 0, busy: 0 };
    const states = pool.states();
    byApp.set(app, {
      starting: total.starting + states.starting,
      idle: total.idle + states.idle,
      busy: total.busy + states.busy,
    });
  }
  return [...byApp].map(([app, states]) => ({ app, ...states }));
}
