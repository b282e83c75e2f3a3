/**
 * Every server setting: where it comes from (environment variable, `runplane serve` flag), its default,
 * and how it is validated. `loadConfig` reports every problem at once.
 */
import { cpus, totalmem } from "node:os";
import { resolve } from "node:path";
import { type GpuEntry, parseGpuList } from "./gpus/mod.ts";
import { DEFAULT_IMAGE_REGISTRIES, parseImageReference, parseRegistryList } from "./images/mod.ts";
import { MASTER_KEY_HOWTO, type MasterKey, parseMasterKey } from "./keys/master_key.ts";

/** The server's validated settings. */
export interface Config {
  host: string;
  port: number;
  dataDir: string;
  /** A `postgres://` URL selects PostgreSQL; null keeps the SQLite file in the data dir. Never log it unredacted. */
  databaseUrl: string | null;
  /**
   * The base URL other processes reach this one at (`RUNPLANE_ADVERTISE_URL`): with PostgreSQL it makes
   * the processes one cluster that counts, places and reaches replicas together (issue 31); null: each
   * process counts its own.
   */
  advertiseUrl: string | null;
  /** The most PostgreSQL connections the process opens (its pool's size). */
  databasePoolSize: number;
  /** Whether the hot paths' statements are named prepared statements on PostgreSQL (planned once per connection). */
  databasePreparedStatements: boolean;
  /** How long a PostgreSQL statement may run before the server cancels it, in milliseconds. */
  databaseStatementTimeoutMs: number;
  /**
   * Seals the keys kept in a PostgreSQL store (required with one, unused with SQLite). Prints as
   * `[redacted]`; never log its bytes.
   */
  masterKey: MasterKey | null;
  appsDir: string;
  bodyLimitBytes: number;
  /** The largest deploy bundle (gzip tarball) accepted, in bytes. */
  bundleLimitBytes: number;
  /** How long one build step (a command, the pip install) may run, in milliseconds. */
  buildTimeoutMs: number;
  /**
   * Whether tenants' code (replicas, build steps) runs in the sandbox: `auto` when bubblewrap and user
   * namespaces work (otherwise the apps folder is served and deployments are refused, loudly: see
   * `server/placement/deployment_gate.ts`), `required` refuses to start without it, `off` never.
   */
  sandbox: "auto" | "required" | "off";
  /**
   * Whether each replica gets a cgroup with its `[hardware]` memory and CPU and the pids limit: `auto` when
   * cgroups can be written here (a loud warning otherwise), `required` refuses to start without them, `off` never.
   */
  cgroups: "auto" | "required" | "off";
  /** The most processes and threads one replica may have at once (its cgroup's pids limit). */
  replicaPids: number;
  /** Whether Python replicas are forked from a template per app version that imported the app once. */
  forkReplicas: boolean;
  /**
   * HTTP processes sharing the port (`RUNPLANE_WORKERS`): 1 is one process that does everything; more
   * start a supervisor that alone owns replicas and the store's background work, and that many workers.
   */
  workers: number;
  /** Cores the replicas of this host may reserve between them (each its app's `[hardware] cpu`). */
  hostCpu: number;
  /** Bytes of memory the replicas of this host may reserve between them (each its app's `[hardware] memory`). */
  hostMemoryBytes: number;
  /**
   * The GPUs replicas may be given (`RUNPLANE_GPUS`): null takes nvidia-smi's list; an empty list is none;
   * entries nvidia-smi does not list are used as given (a fake inventory, for tests).
   */
  gpus: GpuEntry[] | null;
  /** The nvidia-smi command that lists the host's GPUs (a name looked up on PATH, or a path). */
  nvidiaSmi: string;
  /** The most replicas one project's apps may ask for, `scaling.max_replicas` summed over them. */
  projectReplicaLimit: number;
  /** Lets deployed apps name an external `runtime.custom.url` (checked by the webhook guard at connect time). */
  allowExternalRuntimes: boolean;
  /** Lets `[dependencies.pip]` entries be pip options, paths or URLs instead of PEP 508 names with versions. */
  pipAllowUnpinned: boolean;
  /** pip's index for builds (`--index-url`); null: pip's default, or none when only find-links is set. Never log it unredacted. */
  pipIndexUrl: string | null;
  /** A folder or URL of wheels for builds (`--find-links`); null for none. */
  pipFindLinks: string | null;
  /** The registry hosts `[build] base_image` may name (`RUNPLANE_IMAGE_REGISTRIES`). */
  imageRegistries: string[];
  /** The registries pulled from over plain HTTP or without certificate checks (`RUNPLANE_INSECURE_REGISTRIES`). */
  insecureRegistries: string[];
  /** A containers auth file (`auth.json`) for every pull; null: anonymous pulls. */
  registryAuthFile: string | null;
  /** The most bytes unpacked image roots and system layers may take on this host; 0: unbounded. */
  imageCacheBytes: number;
  /** An image root or system layer used within this long is never evicted. */
  imageCacheMinAgeMs: number;
  /** The cluster's registry (`host[:port][/path]`) where hosts share the layers they build; null: none. */
  sharedRegistry: string | null;
  logLevel: "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";
  /** Check every response against the contract and fail loudly on a mismatch. */
  responseCheck: boolean;
  /** When set, `GET /metrics` needs it as a bearer token. */
  metricsToken: string | null;
  /** How long a graceful stop waits for in-flight calls and runs, in milliseconds. */
  drainTimeoutMs: number;
  /** The largest WebSocket message either side may send through a WebSocket run, in bytes (1009 above it). */
  wsMaxMessageBytes: number;
  /** The most WebSocket runs open at once per project on this process (429 before the upgrade above it). */
  wsMaxPerProject: number;
  /** How often each side of a WebSocket run is pinged; a side that answered nothing since the last ping is gone. */
  wsPingIntervalMs: number;
  /** The most repository-tree paths kept in memory, across every cached commit. */
  treeCacheEntries: number;
  /** Calls that may wait for a slot per app before new ones get 429. */
  appQueueLimit: number;
  /** Silence on an event stream after which a `: ping` comment is sent. */
  sseHeartbeatMs: number;
  /** Most bytes of output kept per run. */
  runLogLimitBytes: number;
  /** How long a finished run keeps its result, in milliseconds. */
  resultTtlMs: number;
  /** How long a finished run's whole record is kept, in milliseconds (then deleted). */
  runRetentionMs: number;
  /** The largest result stored with a run (and sent in its webhook), in bytes of JSON. */
  resultLimitBytes: number;
  /** How long a run's claim lasts without renewal before another process may end it, in milliseconds. */
  runLeaseMs: number;
  /** Where project volumes live (`RUNPLANE_VOLUMES_DIR`); null: `<data dir>/volumes`. */
  volumesDir: string | null;
  /**
   * How a volume's size is held (`RUNPLANE_VOLUMES_MODE`): `loop` (an ext4 image per volume, loop-mounted;
   * needs root), `directory` (plain folders, the file system under them holds the limit); null: `loop` when
   * the server runs as root, else `directory` with a warning at start.
   */
  volumesMode: "loop" | "directory" | null;
  /** The vendor word in the webhook signature header names (`X-<vendor>-Webhook-Signature`). */
  webhookHeaderVendor: string;
  /** Lets webhooks reach loopback, private and link-local addresses (local development only). */
  webhookAllowPrivate: boolean;
  /** The longest one webhook delivery attempt may take, in milliseconds. */
  webhookTimeoutMs: number;
  /** Most webhook attempts in flight at once to one destination (scheme, host, port), per process. */
  webhookPerDestination: number;
  /** The pause between two attempts of a webhook delivery, in milliseconds (at most 5 s). */
  webhookRetryDelayMs: number;
}

/** One setting of `Config[K]`: its variable, flag, default and a parser that returns that key's type. */
export interface SettingSpec<K extends keyof Config = keyof Config> {
  key: K;
  env: string;
  flag: string;
  default: string;
  description: string;
  /** A secret: a problem with it never repeats its value. */
  secret?: boolean;
  /** Returns the value, or throws an Error whose message says what is expected. */
  parse(raw: string, env: Record<string, string | undefined>): Config[K];
}

/**
 * Any one setting, its parser typed against its own key: an entry of `SETTINGS` whose parser returns
 * another type than its `Config` key is a compile error.
 */
export type AnySetting = { [K in keyof Config]: SettingSpec<K> }[keyof Config];

/** Raised when settings are invalid; `problems` lists every one. */
export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "ConfigError";
    this.problems = problems;
  }
}

function integer(min: number, max: number) {
  return (raw: string): number => {
    if (!/^\d+$/.test(raw.trim())) throw new Error(`must be a whole number from ${min} to ${max}`);
    const value = Number(raw);
    if (value < min || value > max) throw new Error(`must be a whole number from ${min} to ${max}`);
    return value;
  };
}

const SIZE_UNITS: Record<string, number> = {
  "": 1,
  b: 1,
  kb: 1024,
  kib: 1024,
  mb: 1024 ** 2,
  mib: 1024 ** 2,
  gb: 1024 ** 3,
  gib: 1024 ** 3,
};

/** Parses `10mb`, `512kb`, `1048576` into bytes. */
export function parseSize(raw: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(raw);
  const unit = match ? SIZE_UNITS[match[2].toLowerCase()] : undefined;
  if (!match || unit === undefined) throw new Error("must be a size such as 10mb, 512kb or a number of bytes");
  return Math.floor(Number(match[1]) * unit);
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Parses `24h`, `90s`, `500ms`, or a bare number in `bareUnit` (milliseconds unless said otherwise),
 * into milliseconds.
 */
export function parseDuration(raw: string, bareUnit: "ms" | "s" = "ms"): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/i.exec(raw);
  if (!match) {
    throw new Error(
      `must be a duration such as 24h, 90s, 500ms or a number of ${bareUnit === "s" ? "seconds" : "milliseconds"}`,
    );
  }
  return Math.round(Number(match[1]) * DURATION_UNITS[(match[2] ?? bareUnit).toLowerCase()]);
}

function duration(minMs: number, maxMs: number, bounds: string, bareUnit: "ms" | "s" = "ms") {
  return (raw: string): number => {
    const value = parseDuration(raw, bareUnit);
    if (value < minMs || value > maxMs) throw new Error(`must be a duration from ${bounds}`);
    return value;
  };
}

function boolean(raw: string): boolean {
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new Error("must be true or false (or 1 or 0)");
}

/** `auto`, `required` or `off`: how a protection of tenants' code (sandbox, cgroups) is asked for. */
/** `host[:port][/path]`: where a cluster's hosts push and pull the layers they build. */
function sharedRegistry(raw: string): string | null {
  const value = raw.trim().replace(/\/+$/, "");
  if (!value) return null;
  try {
    parseImageReference(`${value}/layer:tag`);
  } catch {
    throw new Error("must be a registry host with an optional path, such as 10.0.0.5:5000/runplane");
  }
  // A first part without a dot, a port or `localhost` would be read as a Docker Hub repository.
  const host = value.split("/")[0]!;
  if (!/[.:]/.test(host) && host !== "localhost") {
    throw new Error(
      "must start with a registry host (with a dot, a port, or localhost), such as 10.0.0.5:5000/runplane",
    );
  }
  return value;
}

/** A comma-separated list of registry hosts; the parser's error names the entry. */
function registryList(raw: string): string[] {
  return parseRegistryList(raw);
}

function autoRequiredOff(raw: string): "auto" | "required" | "off" {
  if (raw !== "auto" && raw !== "required" && raw !== "off") throw new Error("must be one of auto, required, off");
  return raw;
}

function path(raw: string): string {
  if (!raw.trim()) throw new Error("must not be empty");
  return resolve(raw);
}

const LOG_LEVELS: ReadonlyArray<Config["logLevel"]> = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

function logLevel(raw: string): Config["logLevel"] {
  const level = LOG_LEVELS.find((level) => level === raw);
  if (level === undefined) throw new Error(`must be one of ${LOG_LEVELS.join(", ")}`);
  return level;
}

/** Every setting, in the order `runplane serve --help` and docs/configuration.md list them. */
export const SETTINGS = [
  {
    key: "host",
    env: "HOST",
    flag: "--host",
    default: "127.0.0.1",
    description: "Address to listen on (0.0.0.0 for every interface)",
    parse: (raw) =>
      raw.trim() || (() => {
        throw new Error("must not be empty");
      })(),
  },
  {
    key: "port",
    env: "PORT",
    flag: "--port",
    default: "8080",
    description: "TCP port to listen on (0 picks a free one)",
    parse: integer(0, 65535),
  },
  {
    key: "dataDir",
    env: "RUNPLANE_DATA_DIR",
    flag: "--data-dir",
    default: "./.runplane",
    description: "Folder of the SQLite store, signing key and local repositories",
    // Only resolved here: the server creates the folder and checks it is writable when it starts
    // (`prepareDataDir`), so that reading settings has no side effect.
    parse: path,
  },
  {
    key: "databaseUrl",
    env: "RUNPLANE_DATABASE_URL",
    flag: "--database-url",
    default: "",
    description:
      "A postgres:// URL: keep the store in that PostgreSQL database, shared by every process given it (unset: the SQLite file in the data dir)",
    parse: (raw) => {
      if (!raw.trim()) return null;
      if (!/^postgres(ql)?:\/\//i.test(raw.trim()) || !URL.canParse(raw.trim())) {
        throw new Error("must be a postgres:// or postgresql:// URL");
      }
      return raw.trim();
    },
  },
  {
    key: "databasePoolSize",
    env: "RUNPLANE_DATABASE_POOL",
    flag: "--database-pool",
    default: "10",
    description: "Most connections to PostgreSQL this process opens",
    parse: integer(1, 1000),
  },
  {
    key: "databasePreparedStatements",
    env: "RUNPLANE_DATABASE_PREPARED_STATEMENTS",
    flag: "--database-prepared-statements",
    default: "true",
    description:
      "Plan the hot paths' PostgreSQL statements once per connection (named prepared statements); false behind PgBouncer older than 1.21 in transaction mode, or without its max_prepared_statements",
    parse: boolean,
  },
  {
    key: "databaseStatementTimeoutMs",
    env: "RUNPLANE_DATABASE_STATEMENT_TIMEOUT",
    flag: "--database-statement-timeout",
    default: "30s",
    description:
      "How long a PostgreSQL statement may run before the server cancels it (the operation then answers 503 store-unavailable)",
    parse: duration(1000, 3_600_000, "1s to 1h", "s"),
  },

  {
    key: "masterKey",
    env: "RUNPLANE_MASTER_KEY",
    flag: "--master-key",
    default: "",
    description:
      "32 random bytes, base64 (`openssl rand -base64 32`), sealing the keys kept in PostgreSQL: required with RUNPLANE_DATABASE_URL, the same in every process, never logged (prefer the variable: a flag shows in the process list)",
    secret: true,
    parse: (raw) => (raw.trim() ? parseMasterKey(raw) : null),
  },
  {
    key: "appsDir",
    env: "RUNPLANE_APPS_DIR",
    flag: "--apps-dir",
    default: "examples/apps",
    description: "Folder of deployed apps: <project_id>/<app_name>/runplane.toml",
    parse: path,
  },
  {
    key: "bodyLimitBytes",
    env: "RUNPLANE_BODY_LIMIT",
    flag: "--body-limit",
    default: "10mb",
    description:
      "Largest accepted request body (413 above it); JSON bodies also nest at most 512 levels (400 above it, on every operation)",
    parse: parseSize,
  },
  {
    key: "bundleLimitBytes",
    env: "RUNPLANE_BUNDLE_LIMIT",
    flag: "--bundle-limit",
    default: "100mb",
    description: "Largest deploy bundle (the app folder as a gzip tarball) accepted; 413 above it",
    parse: parseSize,
  },
  {
    key: "buildTimeoutMs",
    env: "RUNPLANE_BUILD_TIMEOUT",
    flag: "--build-timeout",
    default: "15m",
    description: "Longest one build step (a pre-build or shell command, the pip install) may run",
    parse: duration(1000, 86_400_000, "1s to 24h"),
  },
  {
    key: "advertiseUrl",
    env: "RUNPLANE_ADVERTISE_URL",
    flag: "--advertise-url",
    default: "",
    description:
      "The base URL the other processes on the same PostgreSQL reach this one at (e.g. http://10.0.0.5:8080). Set on every process, it makes them one cluster: an app's min_replicas and max_replicas count across all of them, and a call goes to warm capacity wherever it is. Unset: each process counts its own replicas",
    parse: (raw) => {
      if (!raw.trim()) return null;
      if (!/^https?:\/\//i.test(raw.trim()) || !URL.canParse(raw.trim())) throw new Error("must be an http(s) URL");
      return raw.trim().replace(/\/+$/, "");
    },
  },
  {
    key: "pipIndexUrl",
    env: "RUNPLANE_PIP_INDEX_URL",
    flag: "--pip-index-url",
    default: "",
    description:
      "pip's package index for builds (unset: pip's default, or no index at all when RUNPLANE_PIP_FIND_LINKS is set)",
    secret: true,
    parse: (raw) => {
      if (!raw.trim()) return null;
      if (!/^https?:\/\//i.test(raw.trim()) || !URL.canParse(raw.trim())) throw new Error("must be an http(s) URL");
      return raw.trim();
    },
  },
  {
    key: "sandbox",
    env: "RUNPLANE_SANDBOX",
    flag: "--sandbox",
    default: "auto",
    description:
      "Jail replicas and build steps with bubblewrap: auto (when it works here; else the apps folder is served but deployments are refused, loudly), required (refuse to start without it) or off (tenants' code runs unjailed, deployments accepted)",
    parse: autoRequiredOff,
  },
  {
    key: "cgroups",
    env: "RUNPLANE_CGROUPS",
    flag: "--cgroups",
    default: "auto",
    description:
      "Limit each replica with a cgroup of its own (v2, else v1): its [hardware] memory (swap included) and CPU, and RUNPLANE_REPLICA_PIDS. auto (when cgroups can be written here, else a loud warning), required (refuse to start without them) or off",
    parse: autoRequiredOff,
  },
  {
    key: "replicaPids",
    env: "RUNPLANE_REPLICA_PIDS",
    flag: "--replica-pids",
    default: "512",
    description:
      "Most processes and threads one replica may have at once (its cgroup's pids limit); past it fork() and thread starts fail in the app",
    parse: integer(16, 1_000_000),
  },
  {
    key: "forkReplicas",
    env: "RUNPLANE_FORK_REPLICAS",
    flag: "--fork-replicas",
    default: "true",
    description:
      "Fork Python replicas from a template per app version that imported main.py and [runtime] preload once (in the app's jail), instead of importing again per replica; an app whose import starts threads or initialises CUDA cold-starts anyway. false: every replica cold-starts",
    parse: boolean,
  },
  {
    key: "workers",
    env: "RUNPLANE_WORKERS",
    flag: "--workers",
    default: "auto",
    description:
      "HTTP processes serving the port together (auth, validation, run records, the REST API); with more than 1, a supervisor process alone runs the replicas, builds, webhook deliveries and the store's upkeep, and the workers hand it calls over a Unix socket in the data dir. auto: one per two cores (at most 16) on a host of 4 cores or more, else 1 (on 2 cores the hop costs more than a second worker gives; on 16 cores half as many workers as replicas served the most)",
    parse: (raw) => raw.trim() === "auto" ? autoWorkers(cpus().length) : integer(1, 64)(raw),
  },
  {
    key: "hostCpu",
    env: "RUNPLANE_HOST_CPU",
    flag: "--host-cpu",
    default: "the machine's cores",
    description:
      "Cores this host's replicas may reserve between them, each its app's [hardware] cpu: a replica that does not fit waits (its calls queue) until one ends; idle replicas of other apps are stopped to make room",
    parse: (raw) => {
      const value = Number(raw.trim());
      if (!/^\d+(\.\d+)?$/.test(raw.trim()) || value < 0.05 || value > 100_000) {
        throw new Error("must be a number of cores from 0.05 to 100000, such as 8 or 3.5");
      }
      return value;
    },
  },
  {
    key: "hostMemoryBytes",
    env: "RUNPLANE_HOST_MEMORY",
    flag: "--host-memory",
    default: "the machine's memory",
    description:
      "Memory this host's replicas may reserve between them, each its app's [hardware] memory (a size such as 64gb); leave room for the server itself",
    parse: (raw) => {
      const value = parseSize(raw);
      if (value < 64 * 1024 ** 2) throw new Error("must be a size of at least 64mb, such as 16gb");
      return value;
    },
  },
  {
    key: "gpus",
    env: "RUNPLANE_GPUS",
    flag: "--gpus",
    default: "",
    description:
      "The GPUs replicas may be given, separated by commas: indexes or UUIDs as nvidia-smi lists them (GPU-…), each optionally followed by :MODEL for a GPU nvidia-smi does not list (a fake inventory); none for no GPU. Unset: every GPU nvidia-smi lists",
    parse: parseGpuList,
  },
  {
    key: "nvidiaSmi",
    env: "RUNPLANE_NVIDIA_SMI",
    flag: "--nvidia-smi",
    default: "nvidia-smi",
    description:
      "The nvidia-smi run once at start to list the host's GPUs (index, UUID, model, memory, PCI bus id); where it is missing the host has no GPUs unless RUNPLANE_GPUS lists some",
    parse: (raw) => {
      const value = raw.trim();
      if (!value) throw new Error("must name a command, such as nvidia-smi or /usr/bin/nvidia-smi");
      return value.includes("/") ? resolve(value) : value;
    },
  },
  {
    key: "projectReplicaLimit",
    env: "RUNPLANE_PROJECT_REPLICA_LIMIT",
    flag: "--project-replica-limit",
    default: "32",
    description:
      "Most replicas one project's apps may ask for (scaling.max_replicas summed over them): a deployment past it gets 400, an app of the apps folder 503",
    parse: integer(1, 100_000),
  },
  {
    key: "allowExternalRuntimes",
    env: "RUNPLANE_ALLOW_EXTERNAL_RUNTIMES",
    flag: "--allow-external-runtimes",
    default: "false",
    description:
      "Let deployed apps forward calls to a runtime.custom.url of their own (only to addresses the webhook guard accepts, checked at connect time)",
    parse: boolean,
  },
  {
    key: "pipAllowUnpinned",
    env: "RUNPLANE_PIP_ALLOW_UNPINNED",
    flag: "--pip-allow-unpinned",
    default: "false",
    description:
      "Let [dependencies.pip] entries be pip options, paths or URLs (by default each must be a PEP 508 name with a version specifier)",
    parse: boolean,
  },
  {
    key: "pipFindLinks",
    env: "RUNPLANE_PIP_FIND_LINKS",
    flag: "--pip-find-links",
    default: "",
    description: "A folder (or URL) of wheels pip installs from during builds",
    parse: (raw) => (raw.trim() ? (/^https?:\/\//i.test(raw.trim()) ? raw.trim() : resolve(raw.trim())) : null),
  },
  {
    key: "imageRegistries",
    env: "RUNPLANE_IMAGE_REGISTRIES",
    flag: "--image-registries",
    default: DEFAULT_IMAGE_REGISTRIES.join(","),
    description:
      "The registry hosts an app's [build] base_image may come from, separated by commas (with a port where it has one); a reference to any other is refused at deploy (400). The default is the well-known public registries",
    parse: registryList,
  },
  {
    key: "insecureRegistries",
    env: "RUNPLANE_INSECURE_REGISTRIES",
    flag: "--insecure-registries",
    default: "",
    description:
      "Registries pulled from over plain HTTP or without checking their certificate (a loopback or private mirror), separated by commas; each must also be in RUNPLANE_IMAGE_REGISTRIES",
    parse: registryList,
  },
  {
    key: "registryAuthFile",
    env: "RUNPLANE_REGISTRY_AUTH_FILE",
    flag: "--registry-auth-file",
    default: "",
    description:
      "A containers auth file (auth.json, as podman, skopeo and docker login write it) with the credentials of private registries; unset: images are pulled anonymously. Never logged",
    parse: (raw) => (raw.trim() ? resolve(raw.trim()) : null),
  },
  {
    key: "sharedRegistry",
    env: "RUNPLANE_REGISTRY",
    flag: "--registry",
    default: "",
    description:
      "A registry the hosts of a cluster share (host[:port][/path], e.g. 10.0.0.5:5000/runplane): the host that builds an image's system layer pushes it there, the others pull it instead of building it. Credentials from RUNPLANE_REGISTRY_AUTH_FILE; plain HTTP when its host is in RUNPLANE_INSECURE_REGISTRIES. Unset: each host builds its own",
    parse: sharedRegistry,
  },
  {
    key: "imageCacheBytes",
    env: "RUNPLANE_IMAGE_CACHE_GB",
    flag: "--image-cache-gb",
    default: "50",
    description:
      "Gigabytes (decimals allowed) the unpacked image roots and system layers of [build] base_image may take on this host; above it the least recently used are removed after each build, never one a deployment served here runs in. 0: unbounded",
    parse: (raw) => {
      const gb = Number(raw.trim());
      if (!raw.trim() || !Number.isFinite(gb) || gb < 0) throw new Error("must be a number of gigabytes, 0 or more");
      return Math.round(gb * 1024 ** 3);
    },
  },
  {
    key: "imageCacheMinAgeMs",
    env: "RUNPLANE_IMAGE_CACHE_MIN_AGE",
    flag: "--image-cache-min-age",
    default: "30m",
    description:
      "How long after its last use (a pull, an unpack, a build, being served) an image root or system layer is kept whatever RUNPLANE_IMAGE_CACHE_GB says: a build may be reading it, a replica of the deployment just replaced may still be draining",
    parse: duration(0, 7 * 86_400_000, "0s to 7 days"),
  },
  {
    key: "logLevel",
    env: "RUNPLANE_LOG_LEVEL",
    flag: "--log-level",
    default: "info",
    description: `Log level: ${LOG_LEVELS.join(", ")}`,
    parse: logLevel,
  },
  {
    key: "responseCheck",
    env: "RUNPLANE_RESPONSE_CHECK",
    flag: "--response-check",
    default: "on unless NODE_ENV=production",
    description: "Check every response against the contract; a mismatch becomes a loud 500",
    parse: boolean,
  },
  {
    key: "metricsToken",
    env: "RUNPLANE_METRICS_TOKEN",
    flag: "--metrics-token",
    default: "",
    description: "When set, GET /metrics requires it as a bearer token",
    parse: (raw) => raw || null,
  },
  {
    key: "drainTimeoutMs",
    env: "RUNPLANE_DRAIN_TIMEOUT",
    flag: "--drain-timeout",
    default: "30s",
    description:
      "On SIGTERM/SIGINT, how long in-flight calls, streams and async runs may finish before they are stopped",
    parse: duration(0, 3_600_000, "0s to 1h"),
  },
  {
    key: "wsMaxMessageBytes",
    env: "RUNPLANE_WS_MAX_MESSAGE",
    flag: "--ws-max-message",
    default: "16mb",
    description:
      "Largest WebSocket message (text or binary, reassembled) a caller or an app may send through a WebSocket run; above it the connection closes with 1009",
    parse: (raw) => {
      const bytes = parseSize(raw);
      if (bytes < 1024 || bytes > 1024 ** 3) throw new Error("must be a size from 1kb to 1gb");
      return bytes;
    },
  },
  {
    key: "wsMaxPerProject",
    env: "RUNPLANE_WS_MAX_PER_PROJECT",
    flag: "--ws-max-per-project",
    default: "1000",
    description: "Most WebSocket runs one project may have open at once on this process; above it a new one gets 429",
    parse: integer(1, 1_000_000),
  },
  {
    key: "wsPingIntervalMs",
    env: "RUNPLANE_WS_PING_INTERVAL",
    flag: "--ws-ping-interval",
    default: "30s",
    description:
      "How often both sides of a WebSocket run are pinged; a side that sent nothing (not even a pong) since the previous ping is gone, and the connection closes",
    parse: duration(100, 3_600_000, "100ms to 1h"),
  },
  {
    key: "treeCacheEntries",
    env: "RUNPLANE_TREE_CACHE_ENTRIES",
    flag: "--tree-cache-entries",
    default: "500000",
    description: "Most repository-tree paths cached in memory across commits (0 turns the cache off)",
    parse: integer(0, 100_000_000),
  },
  {
    key: "appQueueLimit",
    env: "RUNPLANE_APP_QUEUE_LIMIT",
    flag: "--app-queue-limit",
    default: "100",
    description: "Calls that may wait for a free replica slot per app; past it calls get 429 with Retry-After",
    parse: integer(0, 100_000),
  },
  {
    key: "sseHeartbeatMs",
    env: "RUNPLANE_SSE_HEARTBEAT",
    flag: "--sse-heartbeat",
    default: "15",
    description: "Seconds of silence on an event stream after which a `: ping` comment is sent",
    parse: duration(50, 3_600_000, "0.05s to 3600s", "s"),
  },
  {
    key: "resultTtlMs",
    env: "RUNPLANE_RESULT_TTL",
    flag: "--result-ttl",
    default: "24h",
    description: "How long a finished run keeps its result (then `result_expired`)",
    parse: duration(1000, 3650 * 86_400_000, "1s to 3650d"),
  },
  {
    key: "runRetentionMs",
    env: "RUNPLANE_RUN_RETENTION",
    flag: "--run-retention",
    default: "30d",
    description:
      "How long a finished run's record is kept (with its logs and webhook attempts); then it is deleted. Never before its result TTL or its Idempotency-Key's 24 h",
    parse: duration(1000, 3650 * 86_400_000, "1s to 3650d"),
  },
  {
    key: "runLogLimitBytes",
    env: "RUNPLANE_RUN_LOG_LIMIT",
    flag: "--run-log-limit",
    default: "1mb",
    description:
      "Most output kept per run (its function's stdout, stderr and logging lines); past it the oldest lines are dropped and the log says `truncated`",
    parse: (raw) => {
      const value = parseSize(raw);
      if (value < 1024 || value > 1024 ** 3) throw new Error("must be a size from 1kb to 1gb");
      return value;
    },
  },
  {
    key: "resultLimitBytes",
    env: "RUNPLANE_RESULT_LIMIT",
    flag: "--result-limit",
    default: "1mb",
    description:
      "Largest result stored with a run and sent in its webhook (JSON bytes); a larger one is stored truncated (`result_truncated`)",
    parse: (raw) => {
      const value = parseSize(raw);
      if (value < 1024 || value > 1024 ** 3) throw new Error("must be a size from 1kb to 1gb");
      return value;
    },
  },
  {
    key: "runLeaseMs",
    env: "RUNPLANE_RUN_LEASE",
    flag: "--run-lease",
    default: "30s",
    description:
      "How long a claimed run stays owned without renewal; a crashed process's runs end `interrupted` after it",
    parse: duration(500, 3_600_000, "500ms to 1h"),
  },
  {
    key: "webhookHeaderVendor",
    env: "RUNPLANE_WEBHOOK_HEADER_VENDOR",
    flag: "--webhook-header-vendor",
    default: "Runplane",
    description: "Vendor word in `X-<vendor>-Webhook-Timestamp` and `X-<vendor>-Webhook-Signature`",
    parse: (raw) => {
      if (!/^[A-Za-z0-9]{1,32}$/.test(raw)) throw new Error("must be 1 to 32 letters or digits");
      return raw;
    },
  },
  {
    key: "webhookAllowPrivate",
    env: "RUNPLANE_WEBHOOK_ALLOW_PRIVATE",
    flag: "--webhook-allow-private",
    default: "false",
    description: "Let webhooks reach loopback, private, link-local and metadata addresses (local development only)",
    parse: boolean,
  },
  {
    key: "webhookTimeoutMs",
    env: "RUNPLANE_WEBHOOK_TIMEOUT",
    flag: "--webhook-timeout",
    default: "10s",
    description: "Longest one webhook delivery attempt may take",
    parse: duration(100, 120_000, "100ms to 120s"),
  },
  {
    key: "webhookPerDestination",
    env: "RUNPLANE_WEBHOOK_PER_DESTINATION",
    flag: "--webhook-per-destination",
    default: "64",
    description:
      "Most webhook attempts in flight at once to one destination (scheme, host, port) per process, of 128 in all: a receiver that hangs holds no more",
    parse: integer(1, 128),
  },
  {
    key: "webhookRetryDelayMs",
    env: "RUNPLANE_WEBHOOK_RETRY_DELAY",
    flag: "--webhook-retry-delay",
    default: "2s",
    description: "Pause between webhook delivery attempts",
    parse: duration(0, 5000, "0s to 5s"),
  },
  {
    key: "volumesDir",
    env: "RUNPLANE_VOLUMES_DIR",
    flag: "--volumes-dir",
    default: "",
    description:
      "Folder of project volumes (unset: <data dir>/volumes). A cluster points every host at one shared file system here (NFS, say) with RUNPLANE_VOLUMES_MODE=directory",
    parse: (raw) => (raw.trim() ? resolve(raw) : null),
  },
  {
    key: "volumesMode",
    env: "RUNPLANE_VOLUMES_MODE",
    flag: "--volumes-mode",
    default: "",
    description:
      "How a volume's size is a hard limit: loop (an ext4 image per volume, loop-mounted: a write past it is ENOSPC; needs root) or directory (plain folders: the file system under RUNPLANE_VOLUMES_DIR must hold the limit, e.g. a quota per project folder; the files API still refuses uploads past it). Unset: loop when the server runs as root, else directory with a warning at start",
    parse: (raw) => {
      if (raw.trim() === "") return null;
      if (raw !== "loop" && raw !== "directory") throw new Error("must be loop or directory");
      return raw;
    },
  },
] satisfies AnySetting[];

/** Compiles only while every `Config` key has an entry in `SETTINGS` (else it names the missing keys). */
type MissingSettings = Exclude<keyof Config, (typeof SETTINGS)[number]["key"]>;
const everyKeyHasASetting: [MissingSettings] extends [never] ? true : MissingSettings = true;
void everyKeyHasASetting;

/** Flag values by setting key, taking precedence over the environment. */
export type SettingOverrides = Partial<Record<keyof Config, string>>;

/** A setting's raw text and where it came from: its flag, else its variable, else its default. */
function rawValue(setting: AnySetting, env: Record<string, string | undefined>, overrides: SettingOverrides) {
  const fromFlag = overrides[setting.key];
  // Defaults that depend on other variables, or on the machine.
  const fallback = setting.key === "responseCheck"
    ? (env.NODE_ENV === "production" ? "false" : "true")
    : setting.key === "hostCpu"
    ? String(cpus().length || 1)
    : setting.key === "hostMemoryBytes"
    ? String(totalmem())
    : setting.default;
  return { raw: fromFlag ?? env[setting.env] ?? fallback, source: fromFlag !== undefined ? setting.flag : setting.env };
}

/**
 * One line of a `ConfigError` about setting `key`: `<variable or flag>="<raw value>": <message>`. Also
 * for problems found after `loadConfig`, such as an unwritable data dir found at start-up.
 */
export function settingProblem(
  key: keyof Config,
  message: string,
  options: { env?: Record<string, string | undefined>; overrides?: SettingOverrides } = {},
): string {
  const setting = SETTINGS.find((s) => s.key === key);
  if (!setting) throw new Error(`unknown setting ${key}`);
  const { raw, source } = rawValue(setting, options.env ?? process.env, options.overrides ?? {});
  return `${source}=${shownValue(setting, raw)}: ${message}`;
}

/** A setting's raw value as a problem shows it: a secret never, a URL without its password. */
function shownValue(setting: AnySetting, raw: string): string {
  if ("secret" in setting && setting.secret) return raw ? '"***"' : '""';
  return JSON.stringify(raw.replace(/(\/\/[^/:@\s]*:)[^@\s]*@/g, "$1***@"));
}

/**
 * What `RUNPLANE_WORKERS=auto` means on a host of `cores` cores: one worker per two cores, at most 16, from
 * 4 cores up; below, one process (measured on 2 cores: two workers served 0.82–0.89× of one process's sync
 * calls, the hop to the supervisor costing ~70 µs of CPU per call). Half, not all: on a 16-core machine
 * (2026-11-29, 14 replicas, the `cores` bench) 7 workers served 2.6× one front door's sync calls against
 * 2.2× for 14 workers, and a CPU-bound function 0.98× against 0.96× (the replicas need the cores).
 */
export function autoWorkers(cores: number): number {
  return cores >= 4 ? Math.min(16, Math.floor(cores / 2)) : 1;
}

/** Parses one setting into `out`; generic so that its key and value stay paired. */
function parseInto<K extends keyof Config>(
  out: Partial<Config>,
  setting: SettingSpec<K>,
  raw: string,
  env: Record<string, string | undefined>,
) {
  out[setting.key] = setting.parse(raw, env);
}

/** True once `parsed` has a value for every setting (what `loadConfig` checks before returning it). */
function isComplete(parsed: Partial<Config>): parsed is Config {
  return SETTINGS.every((setting) => setting.key in parsed);
}

/**
 * Reads and validates every setting from `env`, with `overrides` (flag values, by setting key) taking
 * precedence. Throws a `ConfigError` listing every invalid value. Pure: nothing is created or checked on
 * disk (see `prepareDataDir`).
 */
export function loadConfig(
  env: Record<string, string | undefined> = process.env,
  overrides: SettingOverrides = {},
): Config {
  const problems: string[] = [];
  const out: Partial<Config> = {};
  for (const setting of SETTINGS) {
    const { raw, source } = rawValue(setting, env, overrides);
    try {
      parseInto(out, setting, raw, env);
    } catch (error) {
      problems.push(`${source}=${shownValue(setting, raw)}: ${(error as Error).message}`);
    }
  }
  if (out.databaseUrl && out.masterKey === null) {
    problems.push(
      `RUNPLANE_MASTER_KEY is not set: with RUNPLANE_DATABASE_URL the signing and data keys are kept in the database, sealed with it; ${MASTER_KEY_HOWTO}`,
    );
  }
  if (out.advertiseUrl && !out.databaseUrl) {
    problems.push(
      "RUNPLANE_ADVERTISE_URL needs RUNPLANE_DATABASE_URL: the processes of a cluster share one PostgreSQL",
    );
  }
  if (problems.length) throw new ConfigError(problems);
  if (!isComplete(out)) throw new Error("a setting was parsed to nothing");
  return out;
}

/** The settings as docs/configuration.md's Markdown table (kept equal to it by a test). */
export function settingsMarkdown(): string {
  const cell = (text: string) => text.replace(/\|/g, "\\|");
  const rows = SETTINGS.map((s) =>
    `| \`${s.env}\` | \`${s.flag}\` | ${s.default === "" ? "(none)" : `\`${s.default}\``} | ${cell(s.description)} |`
  );
  return ["| Variable | Flag | Default | Meaning |", "|---|---|---|---|", ...rows].join("\n");
}
