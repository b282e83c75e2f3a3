/**
 * `[functions.<name>]` of `runplane.toml`: settings of one function of a Python app's main.py. Today one
 * key, `batch = { max_size, wait_ms }` (issue 49): the function's calls are grouped into batches in
 * front of its replica (`_worker.py`'s Batcher). Checked key by key like the rest of the file.
 */
/** The error a problem is thrown as (the caller's `AppConfigError`: this module imports nothing of it). */
type ConfigError = new(message: string) => Error;

/** `batch`: how a batched function's calls are grouped. */
export interface BatchSettings {
  /** The most calls in one batch. */
  maxSize: number;
  /** How long a batch waits for more calls after its first, in milliseconds. */
  waitMs: number;
}

/** One function's settings. */
export interface FunctionSettings {
  batch?: BatchSettings;
}

/** The batched functions as the worker harness is told them: name → [max_size, wait_ms]. */
export type BatchSpecs = Record<string, [number, number]>;

/** The bounds of `batch`'s keys. */
export const BATCH_BOUNDS = {
  maxSize: { min: 1, max: 1024 },
  waitMs: { min: 0, max: 10_000 },
} as const;

/** The most `[functions.<name>]` tables one file may have. */
export const MAX_FUNCTIONS = 256;

/** A public Python function name (no leading underscore: private names are never called). */
const FUNCTION_NAME = /^[A-Za-z][A-Za-z0-9_]{0,99}$/;

function isTable(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date);
}

function wholeNumber(
  table: Record<string, unknown>,
  key: string,
  where: { path: string; bounds: { min: number; max: number }; AppConfigError: ConfigError },
) {
  const { path, bounds, AppConfigError } = where;
  const value = table[key];
  if (value === undefined) throw new AppConfigError(`${path}.${key} is missing; give a whole number`);
  if (typeof value !== "number" || !Number.isInteger(value) || value < bounds.min || value > bounds.max) {
    throw new AppConfigError(
      `${path}.${key} must be a whole number from ${bounds.min} to ${bounds.max}, got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

function batchSettings(value: unknown, path: string, AppConfigError: ConfigError): BatchSettings {
  if (!isTable(value)) throw new AppConfigError(`${path} must be a table such as { max_size = 32, wait_ms = 10 }`);
  for (const key of Object.keys(value)) {
    if (key !== "max_size" && key !== "wait_ms") {
      throw new AppConfigError(`unknown key ${path}.${key}; remove it or use one of max_size, wait_ms`);
    }
  }
  return {
    maxSize: wholeNumber(value, "max_size", { path, bounds: BATCH_BOUNDS.maxSize, AppConfigError }),
    waitMs: wholeNumber(value, "wait_ms", { path, bounds: BATCH_BOUNDS.waitMs, AppConfigError }),
  };
}

/** Options of `parseFunctions`. */
export interface ParseFunctionsOptions {
  /** The app's `deployment.runtime`: `[functions]` is for Python apps. */
  runtime: "python" | "custom";
  /** What a problem is thrown as: `_app_config.ts`'s `AppConfigError`. */
  error: ConfigError;
}

/**
 * Reads `[functions]` (the raw TOML value, undefined when absent). Throws `options.error` naming the key. Whether each name is a function of main.py, and not a
 * generator, is checked where main.py is imported (the worker's load error).
 */
export function parseFunctions(raw: unknown, options: ParseFunctionsOptions): Record<string, FunctionSettings> {
  const { runtime, error: AppConfigError } = options;
  if (raw === undefined) return {};
  if (!isTable(raw)) throw new AppConfigError("functions must be a table of [functions.<name>] tables");
  const entries = Object.entries(raw);
  if (entries.length && runtime !== "python") {
    throw new AppConfigError("[functions.<name>] applies to Python apps; a custom runtime has no functions");
  }
  if (entries.length > MAX_FUNCTIONS) {
    throw new AppConfigError(`functions has ${entries.length} tables; at most ${MAX_FUNCTIONS} are allowed`);
  }
  const functions: Record<string, FunctionSettings> = {};
  for (const [name, value] of entries) {
    const path = `functions.${FUNCTION_NAME.test(name) ? name : JSON.stringify(name).slice(0, 120)}`;
    if (!FUNCTION_NAME.test(name)) {
      throw new AppConfigError(
        `${path} is not a public Python function name (a letter, then letters, digits or _, at most 100)`,
      );
    }
    if (!isTable(value)) throw new AppConfigError(`${path} must be a table ([${path}])`);
    for (const key of Object.keys(value)) {
      if (key !== "batch") throw new AppConfigError(`unknown key ${path}.${key}; remove it or use batch`);
    }
    functions[name] = value.batch === undefined
      ? {}
      : { batch: batchSettings(value.batch, `${path}.batch`, AppConfigError) };
  }
  return functions;
}

/** The batched functions of `functions`, as the worker harness is told them (`--batch`). */
export function batchSpecs(functions: Record<string, FunctionSettings>): BatchSpecs {
  const specs: BatchSpecs = {};
  for (const [name, { batch }] of Object.entries(functions)) {
    if (batch) specs[name] = [batch.maxSize, batch.waitMs];
  }
  return specs;
}

/**
 * How many calls one slot of `replica_concurrency` admits to a replica: 1 without batched functions;
 * with them, twice the largest `max_size`, so that the next batch fills while one runs (a batch is one
 * slot: the worker runs at most `replica_concurrency` batches or calls at once).
 */
export function callsPerSlot(functions: Record<string, FunctionSettings>): number {
  const sizes = Object.values(functions).map((settings) => settings.batch?.maxSize ?? 0);
  const largest = Math.max(0, ...sizes);
  return largest > 0 ? 2 * largest : 1;
}

/**
 * Calls one replica of an app takes at once: `replica_concurrency`, times `callsPerSlot` (so an app with
 * batched functions admits enough calls to fill its batches).
 */
export function slotsPerReplica(config: { replicaConcurrency: number; functions: Record<string, FunctionSettings> }) {
  return config.replicaConcurrency * callsPerSlot(config.functions);
}
