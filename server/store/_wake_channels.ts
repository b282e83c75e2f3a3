/**
 * The wake-up channels, the payload limit, and the check of a channel and a payload that both notifiers
 * make. `notifier.ts` re-exports them.
 */

/**
 * The fixed channels: new queued runs, due webhook deliveries, cancels asked of another process,
 * deployments queued or activated, run changes of watched projects, which projects are watched,
 * projects whose secrets changed, and the cluster's hosts and replica seats.
 */
export const WAKE_CHANNELS = [
  "runplane_runs",
  "runplane_deliveries",
  "runplane_cancel",
  "runplane_deployments",
  "runplane_run_events",
  "runplane_run_watch",
  "runplane_project_secrets",
  "runplane_cluster",
] as const;

/** One of `WAKE_CHANNELS`. */
export type WakeChannel = typeof WAKE_CHANNELS[number];

/** PostgreSQL refuses a NOTIFY payload of 8000 bytes or more. */
export const MAX_WAKE_PAYLOAD_BYTES = 7999;

/** Called with a wake-up's payload (ids, as the notifier's user wrote them), or undefined for none. */
export type WakeListener = (payload: string | undefined) => void;

/** Throws for an unknown channel or a payload of `MAX_WAKE_PAYLOAD_BYTES` or more. */
export function checked(channel: WakeChannel, payload: string | undefined): void {
  if (!(WAKE_CHANNELS as readonly string[]).includes(channel)) {
    throw new Error(`Unknown wake-up channel ${JSON.stringify(channel)}: use one of ${WAKE_CHANNELS.join(", ")}`);
  }
  if (payload !== undefined && Buffer.byteLength(payload) > MAX_WAKE_PAYLOAD_BYTES) {
    throw new Error(`Wake-up payload of ${Buffer.byteLength(payload)} bytes is too large: send ids or nothing`);
  }
}
