/**
 * Run ids: `run_` + 26 lowercase base32 characters, 10 of time (ms) then 16 of randomness, so ids sort
 * by creation time (ids made in the same millisecond by this process keep their order too).
 */
import { timeOrderedId } from "../random/mod.ts";

/** A new run id, greater than every id this process made before. */
export function newRunId(now: number = Date.now()): string {
  return timeOrderedId("run_", now);
}

/** Whether `value` has the shape of a run id. */
export function isRunId(value: string): boolean {
  return /^run_[0-9a-z]{26}$/.test(value);
}
