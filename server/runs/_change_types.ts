/** What the run-change feed carries: one change of one run, and what a subscriber is told. `change_feed.ts` re-exports them. */
import type { RunStatus } from "../store/mod.ts";

/** One change of one run. */
export interface RunChange {
  run_id: string;
  project_id: string;
  app_id: string;
  function_name: string;
  mode: string;
  status: RunStatus;
  /** When it happened (RFC 3339). */
  at: string;
  /** Milliseconds it ran, once it ended. */
  run_time_ms?: number | null;
}

/** What a subscriber is told. */
export type RunChangeListener = (change: RunChange | "missed" | "closed") => void;
