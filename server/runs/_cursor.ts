/** Opaque `listRuns` cursors: the last run id of a page, base64url-wrapped so callers don't build them. */
import { ProblemError } from "../problems/mod.ts";
import { isRunId } from "./run_id.ts";

/** The cursor that continues after `runId`. */
export function encodeCursor(runId: string): string {
  return Buffer.from(`v1:${runId}`).toString("base64url");
}

/** The run id a cursor continues after; a 400 problem when it was not made by `encodeCursor`. */
export function decodeCursor(cursor: string): string {
  const text = Buffer.from(cursor, "base64url").toString("utf8");
  const runId = text.startsWith("v1:") ? text.slice(3) : "";
  if (!isRunId(runId)) {
    throw new ProblemError(
      "validation",
      "cursor is not a cursor this server made; pass next_cursor from the previous page",
      {
        errors: [{ path: "query.cursor", message: "must be the next_cursor of a previous page" }],
      },
    );
  }
  return runId;
}
