/**
 * A project's apps as the API shows them: the deployed ones of the store and those of the apps folder,
 * each with its state, its config, its replicas on this process, its queued runs and the processes that
 * serve it.
 */
import type { AppInfo } from "../runtime/mod.ts";
import { iso, isTerminal } from "./_deployment_views.ts";
import { queuedRunsByApp } from "../runs/mod.ts";
import { type AppRow, type DeploymentRow, selectApps, selectNewestDeployments } from "./_records.ts";
import { selectServed, type ServedRow } from "./_served_records.ts";
import { SERVED_STALE_MS } from "./_served_reporter.ts";
import type { AppRef, AppView, DeploymentsOptions } from "./_types.ts";

function scalingOf(config: AppInfo["config"]): AppView["scaling"] {
  if (!config) return null;
  return {
    min_replicas: config.minReplicas,
    max_replicas: config.maxReplicas,
    replica_concurrency: config.replicaConcurrency,
    cooldown: config.cooldownMs / 1000,
    response_grace_period: config.responseGracePeriodMs / 1000,
  };
}

function hardwareOf(config: AppInfo["config"]): AppView["hardware"] {
  if (!config) return null;
  const { cpu, memoryBytes, gpuCount, compute } = config.hardware;
  return { cpu, memory: memoryBytes / 1024 ** 3, gpu_count: gpuCount, compute: compute ?? null };
}

function replicasOf(info: AppInfo | undefined): AppView["replicas"] {
  if (!info) return { starting: 0, idle: 0, busy: 0, gpus: [] };
  return {
    ...info.replicas,
    gpus: info.gpus.map((replica) => ({
      pid: replica.pid ?? null,
      gpus: replica.gpus.map((gpu) => ({ id: gpu.id, index: gpu.index, model: gpu.model })),
    })),
  };
}

/** What is known of one app: as stored (a deployed app), its newest deployment, as the runtime has it. */
interface AppFacts {
  stored?: AppRow;
  newest?: DeploymentRow;
  info?: AppInfo;
  queued: number;
  served: ServedRow[];
}

function appView(ref: AppRef, found: AppFacts): AppView {
  const { stored, newest, info } = found;
  const base = {
    project_id: ref.projectId,
    app_id: ref.appId,
    runtime: info?.config?.runtime ?? null,
    scaling: scalingOf(info?.config),
    hardware: hardwareOf(info?.config),
    replicas: replicasOf(info),
    queued_runs: found.queued,
  };
  if (!stored) {
    return {
      ...base,
      source: "directory",
      state: info?.error ? "failed" : "ready",
      active_deployment_id: null,
      error: info?.error ?? null,
      created_at: null,
      served_by: [],
    };
  }
  const building = newest !== undefined && !isTerminal(newest.status);
  // Without an active deployment the runtime's error only repeats a failed build's: the store says more.
  const loadError = stored.active_deployment_id ? info?.error : undefined;
  const state = loadError
    ? "failed"
    : stored.active_deployment_id
    ? "ready"
    : building
    ? "building"
    : "failed";
  const error = loadError
    ?? (stored.active_deployment_id ? null : newest?.status === "failed" ? newest.error : null);
  return {
    ...base,
    source: "deployment",
    state,
    active_deployment_id: stored.active_deployment_id,
    error,
    created_at: iso(stored.created_at),
    served_by: found.served.map((row) => ({
      process_id: row.process_id,
      host: row.host,
      deployment_id: row.deployment_id,
      since: iso(row.since)!,
    })),
  };
}

/** The project's apps by name (only `appId` when given): deployed ones and those of the apps folder. */
export async function projectApps(
  options: Pick<DeploymentsOptions, "db" | "runtime" | "now">,
  which: { projectId: string; appId?: string },
): Promise<AppView[]> {
  const { db } = options;
  const { projectId, appId } = which;
  const [stored, newest, queued, served] = await Promise.all([
    selectApps(db, { projectId, appId }),
    selectNewestDeployments(db, projectId),
    queuedRunsByApp(db, { projectId }).then((apps) => new Map(apps.map((app) => [app.appId, app.count]))),
    selectServed(db, { projectId, appId, seenSince: options.now() - SERVED_STALE_MS }),
  ]);
  const infos = new Map(options.runtime.apps(projectId).map((info) => [info.name, info]));
  const names = new Set([...stored.map((a) => a.app_id)]);
  for (const [name, info] of infos) if (info.source === "directory") names.add(name);
  const storedByName = new Map(stored.map((a) => [a.app_id, a]));
  return [...names]
    .filter((name) => appId === undefined || name === appId)
    .sort()
    .map((name) => {
      const info = infos.get(name);
      // An app of the apps folder shadows a deployed one of the same name (the folder wins).
      const app = info?.source === "directory" ? undefined : storedByName.get(name);
      return appView({ projectId, appId: name }, {
        stored: app,
        newest: app ? newest.get(name) : undefined,
        info,
        queued: queued.get(name) ?? 0,
        served: app ? served.filter((row) => row.app_id === name) : [],
      });
    });
}
