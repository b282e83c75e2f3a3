/** Random ids: pooled random bytes and time-ordered ids. */
export { randomBytesPooled } from "./pooled_bytes.ts";
export { timeOrderedId } from "./time_ordered_id.ts";
