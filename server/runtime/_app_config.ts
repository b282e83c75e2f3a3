/**
 * `runplane.toml`: parsed with a real TOML parser and checked key by key, so an unknown key or an
 * out-of-range value is a load error that names the key.
 */
import { isAbsolute, posix, resolve } from "node:path";
import { parse } from "smol-toml";
import { envNameProblem, envValueProblem, MAX_ENV_TOTAL_BYTES, MAX_ENV_VARIABLES } from "./_app_env.ts";
import { aptEntryProblem, condaEntryProblem, pipEntryProblem } from "./_dependency_rules.ts";
import { type FunctionSettings, parseFunctions } from "./_batch_config.ts";

/** The largest `response_grace_period`: 12 hours. */
export const MAX_GRACE_PERIOD_SECONDS = 43_200;

/** How an app's custom runtime is reached. */
export type CustomRuntime =
  | {
    kind: "process";
    /** The command; undefined when `dockerfile` gives it (its ENTRYPOINT and CMD). */
    entrypoint?: string[];
    port?: number;
    healthcheckEndpoint?: string;
    readycheckEndpoint?: string;
    /** The bundle's Dockerfile (a relative path) the app's image is built from; see docs/runplane-toml.md. */
    dockerfile?: string;
  }
  | { kind: "url"; url: string };

/** `[hardware]`: what one replica of the app gets, and reserves of the host's budget. */
export interface Hardware {
  /** Cores (`cpu`): the replica's CPU quota; its thread pools (`OMP_NUM_THREADS`, …) get `ceil(cpu)`. */
  cpu: number;
  /** Bytes (`memory`, given in GiB): the replica's memory limit, swap included. */
  memoryBytes: number;
  /** GPUs per replica (`gpu_count`). */
  gpuCount: number;
  /** `compute`: `"CPU"`, or the GPU model the replica needs; undefined when the file names none. */
  compute?: string;
}

/** `[hardware]`'s defaults: one core, 2 GiB, no GPU. */
export const DEFAULT_HARDWARE: Hardware = { cpu: 1, memoryBytes: 2 * 1024 ** 3, gpuCount: 0 };

/** The bounds of `[hardware]`'s keys. */
export const HARDWARE_BOUNDS = {
  cpu: { min: 0.05, max: 256 },
  /** GiB: from 64 MiB to 1 TiB. */
  memory: { min: 0.0625, max: 1024 },
  gpuCount: { min: 0, max: 16 },
} as const;

/** An app's validated settings, with defaults applied. */
export interface AppConfig {
  name: string;
  runtime: "python" | "custom";
  /** The Python interpreter (an absolute path when the file gave a relative path). */
  python: string;
  minReplicas: number;
  maxReplicas: number;
  replicaConcurrency: number;
  cooldownMs: number;
  responseGracePeriodMs: number;
  dependencies: { pip: Record<string, string>; apt: Record<string, string>; conda: Record<string, string> };
  /** `[build]`; `volumes`: whether the app's `[volumes]` are bound into its build steps too (default false). */
  build: { baseImage?: string; shellCommands: string[]; preBuildCommands: string[]; volumes: boolean };
  custom?: CustomRuntime;
  /** `[env]`: variables for the app's replicas (names checked against the platform's own, see `_app_env.ts`). */
  env: Record<string, string>;
  /** `[network] egress`: whether the app's replicas may open connections to public addresses (default true). */
  egress: boolean;
  /** `[hardware]`: each replica's cores, memory and GPUs. */
  hardware: Hardware;
  /** `[functions.<name>]`: settings of main.py's functions by name (`batch`, see `_batch_config.ts`). */
  functions: Record<string, FunctionSettings>;
  /** `[runtime] preload`: modules a Python replica (and its template) imports before main.py. */
  preload: string[];
  /** `[volumes]`: the project's volumes bound into every replica (and its template), in the file's order. */
  volumes: VolumeMount[];
}

/** One entry of `[volumes]`: project volume `volume` shown at `path` inside the replica. */
export interface VolumeMount {
  /** The entry's key in `[volumes]`. */
  name: string;
  /** The project's volume (the key when the entry names none). */
  volume: string;
  /** An absolute, normalised path inside the replica. */
  path: string;
  readOnly: boolean;
}

/** The most entries `[volumes]` may have. */
export const MAX_VOLUME_MOUNTS = 8;

/** A volume's name, as the volumes API takes it (a folder name on every host: no dot, no slash). */
export const VOLUME_NAME = /^[a-z][a-z0-9_-]{0,62}$/;

/**
 * Folders a volume may not be shown at, nor under, nor above: the system the jail shows read-only, its
 * own `/proc`, `/dev`, `/tmp` and HOME, the image driver's folder. The app's own folder is checked where
 * it is known (`volumeTargetProblem`).
 */
export const RESERVED_VOLUME_PATHS = [
  "/usr",
  "/bin",
  "/sbin",
  "/lib",
  "/lib32",
  "/lib64",
  "/libx32",
  "/etc",
  "/proc",
  "/dev",
  "/sys",
  "/tmp",
  "/run",
  "/home/runplane",
  "/.runplane",
];

/**
 * What a `runplane.toml` may ask for beyond the defaults, decided by who wrote it: the operator's apps
 * folder may do anything, a deployed app what the operator's settings allow. Both default to refusing.
 */
export interface AppConfigOptions {
  /** Accept `[runtime.custom] url` (RUNPLANE_ALLOW_EXTERNAL_RUNTIMES for deployed apps). */
  allowExternalRuntimes?: boolean;
  /** Accept `[dependencies.pip]` entries that are pip options, paths or URLs (RUNPLANE_PIP_ALLOW_UNPINNED). */
  pipAllowUnpinned?: boolean;
}

/** A `runplane.toml` that cannot be served; the message names the file and the key. */
export class AppConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AppConfigError";
  }
}

type Table = Record<string, unknown>;

function isTable(value: unknown): value is Table {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date);
}

class Reader {
  constructor(readonly table: Table, readonly path: string, allowed: string[]) {
    for (const key of Object.keys(table)) {
      if (!allowed.includes(key)) {
        throw new AppConfigError(`unknown key ${this.name(key)}; remove it or use one of ${allowed.join(", ")}`);
      }
    }
  }

  name(key: string): string {
    return this.path ? `${this.path}.${key}` : key;
  }

  section(key: string, allowed: string[]): Reader {
    const value = this.table[key] ?? {};
    if (!isTable(value)) throw new AppConfigError(`${this.name(key)} must be a table ([${this.name(key)}])`);
    return new Reader(value, this.name(key), allowed);
  }

  string(key: string, fallback: string): string;
  string(key: string): string | undefined;
  string(key: string, fallback?: string): string | undefined {
    const value = this.table[key];
    if (value === undefined) return fallback;
    if (typeof value !== "string" || value === "") {
      throw new AppConfigError(`${this.name(key)} must be a non-empty string`);
    }
    return value;
  }

  oneOf<T extends string>(key: string, choices: readonly T[], fallback: T): T {
    const value = this.string(key, fallback);
    if (!choices.includes(value as T)) {
      throw new AppConfigError(`${this.name(key)} must be one of ${choices.join(", ")}, got ${JSON.stringify(value)}`);
    }
    return value as T;
  }

  integer(key: string, fallback: number | undefined, min: number, max: number): number | undefined {
    const value = this.table[key];
    if (value === undefined) return fallback;
    if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
      throw new AppConfigError(
        `${this.name(key)} must be a whole number from ${min} to ${max}, got ${JSON.stringify(value)}`,
      );
    }
    return value;
  }

  seconds(key: string, fallback: number, min: number, max: number): number {
    const value = this.table[key];
    if (value === undefined) return fallback;
    if (typeof value !== "number" || !Number.isFinite(value) || value < min || value > max) {
      throw new AppConfigError(
        `${this.name(key)} must be a number of seconds from ${min} to ${max}, got ${JSON.stringify(value)}`,
      );
    }
    return value;
  }

  /** A number (TOML integer or float) from `min` to `max`; `unit` names what it counts in the error. */
  number(key: string, fallback: number, bounds: { min: number; max: number; unit: string }): number {
    const value = this.table[key];
    if (value === undefined) return fallback;
    if (typeof value !== "number" || !Number.isFinite(value) || value < bounds.min || value > bounds.max) {
      throw new AppConfigError(
        `${this.name(key)} must be a number of ${bounds.unit} from ${bounds.min} to ${bounds.max}, got ${
          JSON.stringify(value)
        }`,
      );
    }
    return value;
  }

  boolean(key: string, fallback: boolean): boolean {
    const value = this.table[key];
    if (value === undefined) return fallback;
    if (typeof value !== "boolean") {
      throw new AppConfigError(`${this.name(key)} must be true or false, got ${JSON.stringify(value)}`);
    }
    return value;
  }

  strings(key: string): string[] | undefined {
    const value = this.table[key];
    if (value === undefined) return undefined;
    if (!Array.isArray(value) || value.some((item) => typeof item !== "string")) {
      throw new AppConfigError(`${this.name(key)} must be an array of strings`);
    }
    return value as string[];
  }

  versions(key: string): Record<string, string> {
    const value = this.table[key] ?? {};
    if (!isTable(value)) throw new AppConfigError(`${this.name(key)} must be a table of package = "version"`);
    for (const [name, version] of Object.entries(value)) {
      if (typeof version !== "string") {
        throw new AppConfigError(`${this.name(key)}.${tomlKey(name)} must be a version string such as "*" or "==1.2"`);
      }
    }
    return { ...value } as Record<string, string>;
  }

  /** `name = "version"` entries, each checked by `problem` (a reason naming what is wrong, or null). */
  packages(key: string, problem: (name: string, version: string) => string | null): Record<string, string> {
    const table = this.versions(key);
    for (const [name, version] of Object.entries(table)) {
      const reason = problem(name, version);
      if (reason) throw new AppConfigError(`${this.name(key)}.${tomlKey(name)} ${reason}`);
    }
    return table;
  }
}

/** A key as TOML may write it: bare when it is a plain word, quoted otherwise (`"--index-url=…"`, `"-r"`). */
function tomlKey(key: string): string {
  return /^[A-Za-z0-9_][A-Za-z0-9_-]*$/.test(key) ? key : JSON.stringify(key);
}

function environment(root: Reader): Record<string, string> {
  const value = root.table.env ?? {};
  if (!isTable(value)) throw new AppConfigError('env must be a table of NAME = "value" ([env])');
  const entries = Object.entries(value);
  if (entries.length > MAX_ENV_VARIABLES) {
    throw new AppConfigError(`env has ${entries.length} variables; at most ${MAX_ENV_VARIABLES} are allowed`);
  }
  let total = 0;
  for (const [name, text] of entries) {
    const reason = envNameProblem(name, text) ?? envValueProblem(text);
    if (reason) throw new AppConfigError(`env.${tomlKey(name)} ${reason}`);
    total += Buffer.byteLength(name) + Buffer.byteLength(text as string);
  }
  if (total > MAX_ENV_TOTAL_BYTES) {
    throw new AppConfigError(
      `env holds ${total} bytes of names and values; at most ${MAX_ENV_TOTAL_BYTES} are allowed`,
    );
  }
  return { ...value } as Record<string, string>;
}

/** A GPU model as `nvidia-smi` names one (`NVIDIA A100-SXM4-80GB`), or a platform's name (`AMPERE_A10`). */
const COMPUTE = /^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$/;

function hardware(root: Reader): Hardware {
  const section = root.section("hardware", ["cpu", "memory", "gpu_count", "compute"]);
  const { cpu: cpuBounds, memory: memoryBounds, gpuCount: gpuBounds } = HARDWARE_BOUNDS;
  const cpu = section.number("cpu", DEFAULT_HARDWARE.cpu, { ...cpuBounds, unit: "cores" });
  const memory = section.number("memory", DEFAULT_HARDWARE.memoryBytes / 1024 ** 3, { ...memoryBounds, unit: "GiB" });
  const gpuCount = section.integer("gpu_count", DEFAULT_HARDWARE.gpuCount, gpuBounds.min, gpuBounds.max)!;
  const compute = section.string("compute");
  if (compute !== undefined && !COMPUTE.test(compute)) {
    throw new AppConfigError(
      `hardware.compute must be "CPU" or a GPU model (letters, digits, spaces, _ . -, at most 64), got ${
        JSON.stringify(compute)
      }`,
    );
  }
  if (compute?.toUpperCase() === "CPU" && gpuCount > 0) {
    throw new AppConfigError(`hardware.compute = "CPU" asks for no GPU, but hardware.gpu_count is ${gpuCount}`);
  }
  if (compute !== undefined && compute.toUpperCase() !== "CPU" && gpuCount === 0) {
    throw new AppConfigError(
      `hardware.compute names a GPU model (${JSON.stringify(compute)}), but hardware.gpu_count is 0; set gpu_count`,
    );
  }
  return {
    cpu,
    // Whole bytes: the kernel takes the limit in bytes (and rounds it to pages).
    memoryBytes: Math.round(memory * 1024 ** 3),
    gpuCount,
    ...(compute !== undefined ? { compute: compute.toUpperCase() === "CPU" ? "CPU" : compute } : {}),
  };
}

function customRuntime(runtime: Reader, options: AppConfigOptions): CustomRuntime | undefined {
  if (runtime.table.custom === undefined) return undefined;
  const custom = runtime.section("custom", [
    "entrypoint",
    "port",
    "healthcheck_endpoint",
    "readycheck_endpoint",
    "url",
    "dockerfile",
  ]);
  const entrypoint = custom.strings("entrypoint");
  const url = custom.string("url");
  const dockerfile = dockerfilePath(custom);
  if (dockerfile !== undefined && url !== undefined) {
    throw new AppConfigError("runtime.custom.dockerfile builds an image to run: it does not go with url");
  }
  if (dockerfile === undefined && (entrypoint === undefined) === (url === undefined)) {
    throw new AppConfigError(
      "runtime.custom needs exactly one of entrypoint (a command to start) or url (an upstream to call)",
    );
  }
  if (url !== undefined) {
    if (!options.allowExternalRuntimes) {
      throw new AppConfigError(
        "runtime.custom.url (an external runtime) is not allowed on this server; use entrypoint to start the app's own server, or ask the operator to set RUNPLANE_ALLOW_EXTERNAL_RUNTIMES",
      );
    }
    if (!/^https?:\/\/[^/]/.test(url) || !URL.canParse(url)) {
      throw new AppConfigError(`runtime.custom.url must be an http(s) URL, got ${JSON.stringify(url)}`);
    }
    for (const key of ["port", "healthcheck_endpoint", "readycheck_endpoint"]) {
      if (custom.table[key] !== undefined) {
        throw new AppConfigError(`runtime.custom.${key} only applies with entrypoint; remove it or use entrypoint`);
      }
    }
    return { kind: "url", url: url.replace(/\/+$/, "") };
  }
  if (entrypoint?.length === 0) {
    throw new AppConfigError('runtime.custom.entrypoint must name a command, e.g. ["python3", "server.py"]');
  }
  return {
    kind: "process",
    ...(entrypoint ? { entrypoint } : {}),
    ...(dockerfile ? { dockerfile } : {}),
    port: custom.integer("port", undefined, 1, 65535),
    healthcheckEndpoint: endpointPath(custom, "healthcheck_endpoint"),
    readycheckEndpoint: endpointPath(custom, "readycheck_endpoint"),
  };
}

/** `[runtime.custom] dockerfile`: a file of the bundle, named by a relative path that stays inside it. */
function dockerfilePath(custom: Reader): string | undefined {
  const path = custom.string("dockerfile");
  if (path === undefined) return undefined;
  const parts = path.split("/");
  if (path === "" || isAbsolute(path) || parts.some((part) => part === ".." || part === "") || path.includes("\0")) {
    throw new AppConfigError(
      `runtime.custom.dockerfile must be a relative path of a file in the bundle, such as "Dockerfile", got ${
        JSON.stringify(path)
      }`,
    );
  }
  return path;
}

/**
 * What a Dockerfile app may not also say: its image comes from its FROM (not `[build] base_image`), and its
 * packages from its RUN steps (not `[dependencies]`, whose layers are keyed by a base image's digest).
 */
function dockerfileProblem(config: Pick<AppConfig, "build" | "dependencies">): string | undefined {
  if (config.build.baseImage !== undefined) {
    return "runtime.custom.dockerfile and [build] base_image both name the app's image; keep one (the Dockerfile's FROM names its base)";
  }
  for (const kind of ["pip", "apt", "conda"] as const) {
    if (Object.keys(config.dependencies[kind]).length) {
      return `runtime.custom.dockerfile builds the app's image: install [dependencies.${kind}] with a RUN step of the Dockerfile instead`;
    }
  }
  return undefined;
}

/** `[runtime.custom]`'s `key`, a path the platform requests of the app's own server. */
function endpointPath(custom: Reader, key: string): string | undefined {
  const path = custom.string(key);
  if (path !== undefined && !path.startsWith("/")) {
    throw new AppConfigError(`runtime.custom.${key} must be a path starting with /, got ${JSON.stringify(path)}`);
  }
  return path;
}

/**
 * Parses and validates the text of an app's `runplane.toml`. `appDir` resolves a relative interpreter
 * path (a virtualenv in the app folder). Throws `AppConfigError` naming the offending key (or entry).
 * `options` says what the file's author may ask for; without it, a `runtime.custom.url` and pip entries
 * other than names with version specifiers are refused.
 */
export function parseAppConfig(text: string, appDir: string, options: AppConfigOptions = {}): AppConfig {
  let raw: Table;
  try {
    raw = parse(text) as Table;
  } catch (error) {
    throw new AppConfigError(`runplane.toml is not valid TOML: ${(error as Error).message.split("\n")[0]}`);
  }
  const root = new Reader(raw, "", [
    "deployment",
    "scaling",
    "dependencies",
    "build",
    "runtime",
    "functions",
    "env",
    "network",
    "hardware",
    "volumes",
  ]);
  const deployment = root.section("deployment", ["name", "runtime", "python", "exclude"]);
  // `exclude` is read by `runplane deploy` when it packs the folder; checked here, unused by the server.
  deployment.strings("exclude");
  const scaling = root.section("scaling", [
    "min_replicas",
    "max_replicas",
    "replica_concurrency",
    "cooldown",
    "response_grace_period",
  ]);
  const dependencies = root.section("dependencies", ["pip", "apt", "conda"]);
  const build = root.section("build", ["base_image", "shell_commands", "pre_build_commands", "volumes"]);
  const runtimeSection = root.section("runtime", ["custom", "preload"]);
  const network = root.section("network", ["egress"]);
  const runtime = deployment.oneOf("runtime", ["python", "custom"] as const, "python");
  const python = deployment.string("python", "python3");
  const minReplicas = scaling.integer("min_replicas", 0, 0, 100)!;
  const maxReplicas = scaling.integer("max_replicas", 1, 1, 100)!;
  if (minReplicas > maxReplicas) {
    throw new AppConfigError(
      `scaling.min_replicas (${minReplicas}) must not exceed scaling.max_replicas (${maxReplicas})`,
    );
  }
  const custom = customRuntime(runtimeSection, options);
  if (runtime === "custom" && !custom) {
    throw new AppConfigError(
      'deployment.runtime = "custom" needs a [runtime.custom] table with entrypoint, dockerfile or url',
    );
  }
  if (runtime === "python" && custom) throw new AppConfigError('[runtime.custom] needs deployment.runtime = "custom"');
  if (custom?.kind === "process" && custom.port !== undefined && maxReplicas > 1) {
    throw new AppConfigError(
      "runtime.custom.port fixes one port, so scaling.max_replicas must be 1; remove port to get a free port per replica",
    );
  }
  const config: AppConfig = {
    name: deployment.string("name", ""),
    runtime,
    python: python.includes("/") && !isAbsolute(python) ? resolve(appDir, python) : python,
    minReplicas,
    maxReplicas,
    replicaConcurrency: scaling.integer("replica_concurrency", 1, 1, 1000)!,
    cooldownMs: Math.round(scaling.seconds("cooldown", 30, 0, 86_400) * 1000),
    responseGracePeriodMs: Math.round(
      scaling.seconds("response_grace_period", 900, 0.001, MAX_GRACE_PERIOD_SECONDS) * 1000,
    ),
    dependencies: {
      pip: dependencies.packages(
        "pip",
        (name, version) => pipEntryProblem(name, version, { allowUnpinned: options.pipAllowUnpinned }),
      ),
      apt: dependencies.packages("apt", aptEntryProblem),
      conda: dependencies.packages("conda", condaEntryProblem),
    },
    build: {
      baseImage: build.string("base_image"),
      shellCommands: build.strings("shell_commands") ?? [],
      preBuildCommands: build.strings("pre_build_commands") ?? [],
      volumes: build.boolean("volumes", false),
    },
    custom,
    env: environment(root),
    egress: network.boolean("egress", true),
    hardware: hardware(root),
    functions: parseFunctions(raw.functions, { runtime, error: AppConfigError }),
    preload: preload(runtimeSection),
    volumes: volumeMounts(root),
  };
  const problem = custom?.kind === "process" && custom.dockerfile ? dockerfileProblem(config) : undefined;
  if (problem) throw new AppConfigError(problem);
  return config;
}

/** A dotted Python module name (`torch`, `numpy.linalg`). */
const MODULE_NAME = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$/;

function preload(runtime: Reader): string[] {
  const names = runtime.strings("preload") ?? [];
  if (names.length > 64) {
    throw new AppConfigError(`runtime.preload names ${names.length} modules; at most 64 are allowed`);
  }
  for (const name of names) {
    if (!MODULE_NAME.test(name)) {
      throw new AppConfigError(
        `runtime.preload entry ${JSON.stringify(name)} is not a Python module name such as "numpy"`,
      );
    }
  }
  return names;
}

/** Whether `path` is `folder`, below it or above it (either would hide the other in the jail). */
function overlaps(path: string, folder: string): boolean {
  const below = (a: string, b: string) => a === b || a.startsWith(b === "/" ? b : `${b}/`);
  return below(path, folder) || below(folder, path);
}

/**
 * Why a volume may not be shown at `path` in a jail that also shows `folders` (the app's folder, its
 * virtualenv), or undefined when it may. `path` is absolute and normalised (`parseAppConfig` checked it).
 */
export function volumeTargetProblem(path: string, folders: readonly string[] = []): string | undefined {
  const hit = [...RESERVED_VOLUME_PATHS, ...folders].find((folder) => overlaps(path, folder));
  return hit === undefined ? undefined : `${JSON.stringify(path)} overlaps ${hit}, which the jail shows itself`;
}

/** `[volumes]`: `key = "/path"` or `key = { volume = "name", path = "/path", read_only = true }`. */
function volumeMounts(root: Reader): VolumeMount[] {
  const value = root.table.volumes ?? {};
  if (!isTable(value)) throw new AppConfigError('volumes must be a table of name = "/path" ([volumes])');
  const entries = Object.entries(value);
  if (entries.length > MAX_VOLUME_MOUNTS) {
    throw new AppConfigError(`volumes has ${entries.length} entries; at most ${MAX_VOLUME_MOUNTS} are allowed`);
  }
  const mounts: VolumeMount[] = [];
  for (const [name, entry] of entries) {
    const key = `volumes.${tomlKey(name)}`;
    const table = isTable(entry) ? new Reader(entry, key, ["volume", "path", "read_only"]) : undefined;
    if (!table && typeof entry !== "string") {
      throw new AppConfigError(`${key} must be a path such as "/models" or a table { volume, path, read_only }`);
    }
    const volume = table?.string("volume") ?? name;
    if (!VOLUME_NAME.test(volume)) {
      throw new AppConfigError(
        `${table?.table.volume !== undefined ? `${key}.volume` : key} names volume ${
          JSON.stringify(volume)
        }: a volume's name is 1 to 63 lowercase letters, digits, - or _, starting with a letter`,
      );
    }
    const path = table ? table.string("path") : entry as string;
    const pathKey = table ? `${key}.path` : key;
    if (path === undefined) {
      throw new AppConfigError(`${pathKey} is missing: the path inside the replica, e.g. "/models"`);
    }
    mounts.push({
      name,
      volume,
      path: mountPath(path, pathKey),
      readOnly: table?.boolean("read_only", false) ?? false,
    });
  }
  for (const [i, mount] of mounts.entries()) {
    const other = mounts.slice(0, i).find((earlier) => overlaps(mount.path, earlier.path));
    if (other) {
      throw new AppConfigError(
        `volumes.${tomlKey(mount.name)} is shown at ${mount.path}, which overlaps volumes.${
          tomlKey(other.name)
        } (${other.path}); give each its own folder`,
      );
    }
  }
  return mounts;
}

/** A mount's path inside the replica: absolute, normalised, at most 255 bytes, no system folder. */
function mountPath(path: string, key: string): string {
  if (
    !path.startsWith("/") || posix.normalize(path).replace(/(.)\/$/, "$1") !== path || path === "/"
    || Buffer.byteLength(path) > 255 || /[\0-\x1f\x7f\\:,]/.test(path)
  ) {
    throw new AppConfigError(
      `${key} must be an absolute, normalised folder path other than / (no .., //, trailing /, control characters, \\, : or ,), such as "/models", got ${
        JSON.stringify(path)
      }`,
    );
  }
  const problem = volumeTargetProblem(path);
  if (problem) throw new AppConfigError(`${key}: ${problem}; pick a folder of its own, such as "/models"`);
  return path;
}
