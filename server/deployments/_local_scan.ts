/**
 * One read of the store by the follower of active deployments (see _local_apps.ts): what each app's
 * active deployment is, and which apps no deployment serves, made what this process serves (but for the
 * adopted apps), then reloaded when that changed.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { Kysely } from "kysely";
import type { Database } from "../store/mod.ts";
import type { LocalBuilds } from "./_local_builds.ts";
import { keyOf, type LocalServed } from "./_local_served.ts";
import { selectActiveDeployments, selectUnservedApps } from "./_records.ts";

/** Options of `scanStore`. */
export interface ScanOptions {
  db: Kysely<Database>;
  builds: LocalBuilds;
  /** The store's clock (when a deployment began to be served here). */
  now(): number;
  /** Serve an active deployment whose build recorded its `runplane.toml` from that file, unbuilt. */
  deferBuilds?: boolean;
  /** Test only: a pause between reading the store and acting on it. */
  testDelayMs?: number;
}

/** Follows the store's apps that no deployment serves; whether that changed anything. */
function syncUnserved(
  local: LocalServed,
  found: { rows: Awaited<ReturnType<typeof selectUnservedApps>>; read: number },
): boolean {
  const { rows, read } = found;
  const wanted = new Map(rows.map((row) => [`${row.project_id}/${row.app_id}`, row]));
  let change = false;
  for (const key of new Set([...wanted.keys(), ...local.unserved.keys()])) {
    const row = wanted.get(key);
    if (local.pinned(key, read) || row?.deployment_id === local.unserved.get(key)?.deploymentId) continue;
    if (row) {
      const error = row.error ?? "its build failed";
      local.unserved.set(key, { projectId: row.project_id, name: row.app_id, deploymentId: row.deployment_id, error });
    } else local.unserved.delete(key);
    change = true;
  }
  return change;
}

/** Reads the store once and serves what it says (see the module's comment). */
export async function scanStore(local: LocalServed, options: ScanOptions): Promise<void> {
  const { builds, db } = options;
  const read = ++local.reads;
  const [rows, unservedRows] = await Promise.all([
    selectActiveDeployments(db),
    selectUnservedApps(db),
  ]);
  if (options.testDelayMs) await sleep(options.testDelayMs);
  const wanted = new Map(rows.map((row) => [keyOf(row), row]));
  let change = false;
  for (const [key, row] of wanted) {
    if (local.stopped) return;
    if (
      local.pinned(key, read) || local.served.get(key)?.app.version === row.deployment_id
      || builds.failed(row.deployment_id)
    ) {
      continue;
    }
    const app = await builds.served(row, { defer: options.deferBuilds === true });
    // Checked again: an adopt may have begun while this deployment was materialised.
    if (!app || local.stopped || local.pinned(key, read)) continue;
    const replaced = local.served.get(key);
    if (replaced) builds.forget(replaced.app.version);
    local.served.set(key, { app, since: options.now() });
    change = true;
  }
  for (const key of [...local.served.keys()]) {
    if (wanted.has(key) || local.pinned(key, read)) continue;
    builds.forget(local.served.get(key)!.app.version);
    local.served.delete(key);
    change = true;
  }
  if (syncUnserved(local, { rows: unservedRows, read })) change = true;
  if (change && !local.stopped) await local.reload();
}
