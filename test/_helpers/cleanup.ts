/**
 * A test's cleanup that always runs whole: node:test skips the `after` hooks that follow one that threw,
 * which once left ten server processes running (a database drop refused with "too many clients" came
 * first) and the test shard waiting on them for ever.
 */
import { after } from "node:test";

/**
 * Returns `defer`: each step given to it runs after the current test, the last given first (servers
 * stop before their database is dropped), every step attempted even when one before it failed; the
 * failures are then reported together. Call it inside the test, before the first step.
 */
export function deferCleanup(): (step: () => unknown) => void {
  const steps: Array<() => unknown> = [];
  after(async () => {
    const failures: unknown[] = [];
    for (const step of steps.reverse()) {
      try {
        await step();
      } catch (error) {
        failures.push(error);
      }
    }
    if (failures.length === 1) throw failures[0];
    if (failures.length > 1) throw new AggregateError(failures, `${failures.length} cleanup steps failed`);
  });
  return (step) => void steps.push(step);
}
