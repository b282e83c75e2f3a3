/** Staging a deployed app's version (`Runtime.stage`): one replica of it started beside the version serving. */
import { type DeployedApp, loadDeployedApp } from "./_app_registry.ts";
import { createPool, label } from "./_app_pool.ts";
import { AppStartError } from "./_failures.ts";
import type { LiveApps } from "./_live_apps.ts";
import { ProblemError } from "../problems/mod.ts";
import type { StagedVersion, StageOptions } from "./_types.ts";

/** Starts `app`'s version in `apps`' staged pools and resolves once it serves (see `Runtime.stage`). */
export async function stageApp(
  apps: LiveApps,
  app: DeployedApp,
  stageOptions: StageOptions = {},
): Promise<StagedVersion> {
  const { options, staged } = apps;
  const { version } = apps.admitted(await loadDeployedApp(app, { allowExternalRuntimes: apps.allowExternalRuntimes }));
  const secrets = await apps.secretsReader()(app.projectId);
  const name = label(version);
  if (!version.config) throw new AppStartError(`${name}: ${version.error}`);
  if (apps.closed) throw new AppStartError(`${name}: the server is closing`);
  const { config } = version;
  const noRoom = `no replica of it fits this host now (its [hardware] or GPUs are taken): the first call loads it`;
  if (config.custom?.kind !== "url" && !options.budget.fits(config.hardware)) {
    return { skipped: noRoom, release: () => Promise.resolve() };
  }
  // Seated, the check runs a replica whether or not this host holds a seat of the app; a reload that
  // serves the version gives its pool the seats' limits (stopping that replica if it holds none).
  const seats = options.seated ? options.seats.limits(name, config.minReplicas) : undefined;
  const limits = seats && { ...seats, maxReplicas: Math.max(1, seats.maxReplicas) };
  const pool = createPool(version, secrets, { ...options, limits })!;
  const release = staged.add({ version, secrets: secrets.fingerprint }, pool);
  const lease = pool.tryAcquire();
  if (!lease) {
    await release();
    return { skipped: noRoom, release };
  }
  // Stopping the replica makes its `ready` reject: the caller does not wait for a slow import.
  const { signal } = stageOptions;
  const onAbort = () => void release();
  signal?.addEventListener("abort", onAbort, { once: true });
  if (signal?.aborted) onAbort();
  try {
    await lease.replica.ready;
  } catch (error) {
    await release();
    if (error instanceof AppStartError || !(error instanceof ProblemError)) throw error;
    throw new AppStartError(error.message);
  } finally {
    signal?.removeEventListener("abort", onAbort);
    // Without min_replicas it is let go after the cooldown, unless a call takes it first.
    lease.release();
  }
  return { release };
}
