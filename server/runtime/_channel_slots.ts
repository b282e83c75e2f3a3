/**
 * Channel slots (`Runtime.tryChannelSlot`): a free slot on a ready Python replica, held for a call another
 * process of the host makes directly on one of the replica's channels.
 */
import { slotsPerReplica } from "./_batch_config.ts";
import type { LiveApps } from "./_live_apps.ts";
import type { ChannelSlot } from "./_types.ts";

/** A free slot of `ref`'s app's current version on a ready Python replica, now; null otherwise. */
export function tryChannelSlot(apps: LiveApps, ref: { projectId: string; app: string }): ChannelSlot | null {
  const { projectId, app } = ref;
  const found = apps.apps.get(`${projectId}/${app}`);
  if (!found?.pool || found.version.config?.runtime !== "python" || found.version.error !== undefined) return null;
  const lease = found.pool.tryAcquire();
  if (!lease) return null;
  const replica = apps.options.pythonReplicas.get(lease.replica);
  if (!replica || !replica.wasReady || !replica.usable) {
    lease.release();
    return null;
  }
  const { deploymentId } = found.version;
  const { responseGracePeriodMs: graceMs } = found.version.config;
  const concurrency = slotsPerReplica(found.version.config);
  return { replica, deploymentId, graceMs, concurrency, release: lease.release };
}
