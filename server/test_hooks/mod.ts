/**
 * Test-only hooks: two environment variables that let a test reproduce what a real host does only by
 * chance (a slow follower, a host whose clock is off). They are not settings: they are not in `Config`,
 * `runplane serve --help` or docs/configuration.md. `server/main.ts` reads them once and passes them to
 * the server in its options; a test that starts a server in its own process reads them the same way.
 * Never set them in production.
 *
 * - `RUNPLANE_TEST_DELAY_LOCAL_SYNC` (a duration, 0s to 60s; default 0): each process waits this long
 *   between reading the active deployments from the store and serving them (not the building process's
 *   own switch), so tests can reproduce a slow follower.
 * - `RUNPLANE_TEST_CLOCK_OFFSET_MS` (whole milliseconds, -86400000 to 86400000; default 0): the server's
 *   host clock (the one given to its store, see `offsetClock`) runs this far ahead (negative: behind), as
 *   on a host with a wrong clock, to check that what orders and schedules follows the database's clock.
 */
import { ConfigError, parseDuration } from "../config.ts";

/** What the test-only variables ask for; `NO_TEST_HOOKS` in production. */
export interface TestHooks {
  /** `RUNPLANE_TEST_DELAY_LOCAL_SYNC`: the pause of every follow-up read of the store's deployments, in ms. */
  delayLocalSyncMs: number;
  /** `RUNPLANE_TEST_CLOCK_OFFSET_MS`: how far the server's host clock is moved, in milliseconds. */
  clockOffsetMs: number;
}

/** No hook: what a server gets when nothing is passed. */
export const NO_TEST_HOOKS: TestHooks = Object.freeze({ delayLocalSyncMs: 0, clockOffsetMs: 0 });

const DELAY_VARIABLE = "RUNPLANE_TEST_DELAY_LOCAL_SYNC";
const OFFSET_VARIABLE = "RUNPLANE_TEST_CLOCK_OFFSET_MS";
const MAX_DELAY_MS = 60_000;
const MAX_OFFSET_MS = 86_400_000;

function parseDelay(raw: string): number {
  const value = parseDuration(raw);
  if (value < 0 || value > MAX_DELAY_MS) throw new Error("must be a duration from 0s to 60s");
  return value;
}

function parseOffset(raw: string): number {
  const problem = "must be a whole number of milliseconds from -86400000 to 86400000";
  if (!/^-?\d+$/.test(raw.trim())) throw new Error(problem);
  const value = Number(raw);
  if (Math.abs(value) > MAX_OFFSET_MS) throw new Error(problem);
  return value;
}

/**
 * Reads the test-only variables from `env` (unset: no hook). Throws a `ConfigError` naming each
 * invalid value, as an invalid setting would.
 */
export function readTestHooks(env: Record<string, string | undefined> = process.env): TestHooks {
  const problems: string[] = [];
  function read(name: string, parse: (raw: string) => number): number {
    const raw = env[name];
    if (raw === undefined) return 0;
    try {
      return parse(raw);
    } catch (error) {
      problems.push(`${name}=${JSON.stringify(raw)}: ${(error as Error).message}`);
      return 0;
    }
  }
  const hooks = {
    delayLocalSyncMs: read(DELAY_VARIABLE, parseDelay),
    clockOffsetMs: read(OFFSET_VARIABLE, parseOffset),
  };
  if (problems.length) throw new ConfigError(problems);
  return hooks;
}

/**
 * A host clock `offsetMs` away from `now` (default `Date.now`): what a server is given as its host's
 * clock under `RUNPLANE_TEST_CLOCK_OFFSET_MS`, in place of moving `Date.now` for the whole process.
 */
export function offsetClock(offsetMs: number, options: { now?: () => number } = {}): () => number {
  const now = options.now ?? (() => Date.now());
  return () => now() + offsetMs;
}
