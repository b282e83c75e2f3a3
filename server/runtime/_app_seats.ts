/**
 * A seated runtime's seats (issue 31): the seats its apps hold in the `SeatBook`, and each app's pool
 * limited to them (`Runtime.addSeat`, `dropSeats`, `heldSeats`, `spareSeats`, `canPlace`).
 */
import { label } from "./_app_pool.ts";
import type { LiveApps } from "./_live_apps.ts";
import { type HeldSeat, splitKey } from "./_seat_book.ts";
import type { SeatRef } from "./_types.ts";

/**
 * Whether one more replica of the app would fit this host's budget now, and it sees every volume the app
 * mounts (a host that cannot see one leaves the app to the hosts that can).
 */
export function canPlace(apps: LiveApps, ref: { projectId: string; app: string }): boolean {
  const { config } = apps.live(ref.projectId, ref.app).version;
  const { volumes } = apps.options;
  if (config.volumes.some((mount) => volumes?.missing(ref.projectId, mount.volume))) return false;
  return config.custom?.kind === "url" || apps.options.budget.fits(config.hardware);
}

/** The app may run one more replica here; false for an app not served. */
export function addSeat(apps: LiveApps, ref: SeatRef): boolean {
  const { options } = apps;
  const found = apps.apps.get(`${ref.projectId}/${ref.appId}`);
  if (!found?.pool || !found.version.config) return false;
  options.seats.add(label(found.version), ref.seat);
  found.pool.setLimits(options.seats.limits(label(found.version), found.version.config.minReplicas));
  return true;
}

/** The apps lost these seats; replicas past their seats stop. */
export function dropSeats(apps: LiveApps, refs: readonly SeatRef[]): void {
  const { options } = apps;
  for (const ref of refs) {
    const key = `${ref.projectId}/${ref.appId}`;
    options.seats.remove(key, ref.seat);
    const found = apps.apps.get(key);
    if (found?.pool && found.version.config) {
      found.pool.setLimits(options.seats.limits(key, found.version.config.minReplicas));
    }
  }
}

/** Every seat held, with its replica's state and calls. */
export function heldSeats(apps: LiveApps): HeldSeat[] {
  const { options } = apps;
  return options.seats.keys().flatMap((key) => options.seats.states(key, apps.apps.get(key)?.pool?.loads() ?? []));
}

/** Removes and returns the seats no replica needs any more. */
export function spareSeats(apps: LiveApps): SeatRef[] {
  const { options } = apps;
  return options.seats.keys().flatMap((key) => {
    const found = apps.apps.get(key);
    const [projectId, appId] = splitKey(key);
    const pool = found?.pool;
    // Calls wait for a replica of these seats: they are needed.
    if (pool && pool.capacity().queued > 0) return [];
    const minReplicas = pool ? (found.version.config?.minReplicas ?? 0) : 0;
    const spare = options.seats.surplus(key, { alive: pool?.loads().length ?? 0, minReplicas });
    if (pool && found.version.config) pool.setLimits(options.seats.limits(key, minReplicas));
    return spare.map((seat) => ({ projectId, appId, seat }));
  });
}
