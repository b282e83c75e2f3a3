/** Run changes packed as wake-up payloads: JSON arrays, each under PostgreSQL's NOTIFY limit. */
import { MAX_WAKE_PAYLOAD_BYTES } from "../store/mod.ts";
import type { RunChange } from "./_change_types.ts";

/** The pending changes as payloads under the NOTIFY limit. */
export function changePayloads(changes: RunChange[]): string[] {
  const out: string[] = [];
  let batch: string[] = [];
  let size = 2;
  for (const change of changes) {
    const text = JSON.stringify(change);
    if (size + text.length + 1 > MAX_WAKE_PAYLOAD_BYTES && batch.length) {
      out.push(`[${batch.join(",")}]`);
      batch = [];
      size = 2;
    }
    batch.push(text);
    size += text.length + 1;
  }
  if (batch.length) out.push(`[${batch.join(",")}]`);
  return out;
}
