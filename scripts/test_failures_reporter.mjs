/**
 * A node:test reporter that notes each failed test as it fails: its file, its suites and the first lines
 * of its error, appended to the file `RUNPLANE_TEST_FAILURES` names. `npm test` prints them once the run
 * has ended, after the TAP stream, so that the end of a long log (all that a CI page may keep of it) still
 * says which test failed and why. Appended at once, not yielded at the end: a shard's process may be made
 * to exit (run_tests.ts) before a reporter's last output. Plain JavaScript: node:test loads reporters
 * before tsx's loader is registered.
 *
 * It notes the runner's own error diagnostics too (an error that outlived its test, "generated
 * asynchronous activity after the test ended"): they are what explains a shard that fails with every
 * test passed, and the TAP stream alone shows them somewhere in the middle of a long log.
 */
import { appendFileSync } from "node:fs";
import { join, relative } from "node:path";

const ROOT = join(import.meta.dirname, "..");
const ERROR_LINES = 12;
/** A diagnostic of the runner's that explains a failure no test reported. */
const RUNNER_ERROR = /asynchronous activity after the test ended|^Error|uncaught|unhandled/i;

/**
 * @typedef {{ name: string, nesting: number, file?: string,
 *   details?: { error?: { failureType?: string, message?: string, cause?: unknown } } }} TestEventData
 */

/**
 * The first lines of a failure's message (an assertion's diff, or the error's cause), followed by the
 * causes under it ("fetch failed" names no reason; its cause does: ECONNRESET, a connect timeout).
 */
function describeError(error) {
  const cause = /** @type {{ message?: string, cause?: unknown } | undefined} */ (error?.cause);
  const text = String(cause?.message ?? error?.message ?? error ?? "");
  const lines = text.split("\n");
  const more = lines.length > ERROR_LINES ? [`… (${lines.length - ERROR_LINES} more lines above in the log)`] : [];
  const causes = [];
  for (let under = cause?.cause, depth = 0; under && depth < 3; under = under.cause, depth++) {
    causes.push(`(caused by: ${under.code ? `${under.code} ` : ""}${String(under.message ?? under).split("\n")[0]})`);
  }
  return [...lines.slice(0, ERROR_LINES), ...more, ...causes].map((line) => `      ${line}`).join("\n");
}

/**
 * The reporter: appends each failure to `RUNPLANE_TEST_FAILURES`; yields nothing.
 * @param {AsyncIterable<{ type: string, data: TestEventData }>} source
 * @returns {AsyncGenerator<string>}
 */
export default async function* testFailures(source) {
  const out = process.env.RUNPLANE_TEST_FAILURES;
  /** @type {Map<string, string[]>} the names of the tests now open in each file, by nesting */
  const open = new Map();
  for await (const event of source) {
    const { name, nesting, file, details } = event.data ?? {};
    const key = file ?? "";
    if (event.type === "test:start") {
      const names = open.get(key) ?? [];
      names.length = nesting;
      names.push(name);
      open.set(key, names);
    }
    if (event.type === "test:diagnostic" && RUNNER_ERROR.test(event.data?.message ?? "")) {
      const where = file ? relative(ROOT, file) : "(no file)";
      if (out) appendFileSync(out, `  ! ${where}: the runner said\n${describeError(event.data)}\n`);
    }
    if (event.type !== "test:fail") continue;
    // A suite that failed because a test in it did is named by that test's entry.
    if (details?.error?.failureType === "subtestsFailed") continue;
    const path = [...(open.get(key) ?? []).slice(0, nesting), name].join(" > ");
    // The file, without a line: tsx's output puts a test file's code on a line or two.
    const where = file ? relative(ROOT, file) : "(no file)";
    if (out) appendFileSync(out, `  ✖ ${where}\n    ${path}\n${describeError(details?.error)}\n`);
  }
}
