/**
 * A node:test reporter that writes how long each test file's tests took, as one JSON object
 * `{ "<path relative to the checkout>": seconds }`, to the file `RUNPLANE_TEST_DURATIONS` names, for
 * `npm test -- --store-durations` (`scripts/run_tests.ts`). A file's time is the sum of its top-level
 * tests' durations; imports shared with other files of its shard are not counted. The file is rewritten
 * as each top-level test ends, not once at the end: a shard's process may be made to exit before a
 * reporter's last output. Plain JavaScript: node:test loads reporters before tsx's loader is registered.
 */
import { writeFileSync } from "node:fs";
import { join, relative } from "node:path";

const ROOT = join(import.meta.dirname, "..");

/**
 * The reporter: keeps the durations file up to date; yields nothing.
 * @param {AsyncIterable<{ type: string, data: { nesting?: number, file?: string, details?: { duration_ms?: number } } }>} source
 * @returns {AsyncGenerator<string>}
 */
export default async function* testDurations(source) {
  const out = process.env.RUNPLANE_TEST_DURATIONS;
  /** @type {Record<string, number>} */
  const seconds = {};
  for await (const event of source) {
    if (event.type !== "test:pass" && event.type !== "test:fail") continue;
    const { nesting, file, details } = event.data;
    if (nesting !== 0 || file === undefined || details?.duration_ms === undefined) continue;
    const path = relative(ROOT, file);
    seconds[path] = (seconds[path] ?? 0) + details.duration_ms / 1000;
    if (out) writeFileSync(out, JSON.stringify(seconds));
  }
}
