/** How many replicas each app's pools have started, for the app's charts (cold starts over time). */
import type { LiveApps } from "./_live_apps.ts";

/**
 * Replicas started per app (`project/app`) by its live pools, current and retired versions summed. A
 * count, not a rate: a reader takes differences, and a retired pool that ends takes its count with it.
 */
export function replicaStarts(apps: LiveApps): Array<{ app: string; starts: number }> {
  const byApp = new Map<string, number>();
  for (const pool of apps.livePools()) byApp.set(pool.label, (byApp.get(pool.label) ?? 0) + pool.starts());
  return [...byApp].map(([app, starts]) => ({ app, starts }));
}
