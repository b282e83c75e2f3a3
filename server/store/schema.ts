/**
 * The store's tables, as Kysely sees them. Times are Unix milliseconds (integers) so that the same
 * queries run on SQLite and PostgreSQL.
 */
import type { Generated } from "kysely";
import type { RunMode, RunStatus } from "./run_states.ts";

/** A project: the unit that owns apps, service accounts and digests. */
export interface ProjectTable {
  id: string;
  created_at: number;
}

/** A service account: the token is never stored, only its id (`jti`) and its claims. */
export interface ServiceAccountTable {
  id: string;
  project_id: string;
  name: string;
  /** Space-separated scopes: `admin`, `deploy`, `rest`, `run`. */
  scopes: string;
  token_id: string;
  created_at: number;
  expires_at: number;
  revoked_at: number | null;
  /** When its token last authenticated a request (at most once a minute is written). */
  last_used_at: number | null;
  /** The account whose token minted this one over the API; null when made where the server runs. */
  parent_id: string | null;
}

/** A base-image digest a project has seen. */
export interface BaseImageDigestTable {
  project_id: string;
  digest: string;
  created_at: number;
  seen_count: Generated<number>;
}

/** A project's repository provider; a project without a row uses the local git folder. */
export interface ProjectIntegrationTable {
  project_id: string;
  provider: "local" | "github";
  github_api_url: string | null;
  /** The GitHub token sealed by the SecretBox; never the plaintext. */
  github_token_sealed: string | null;
  updated_at: number;
}

/** A run: its call, its state and outcome; `input_json` and `webhook_secret` (sealed) only until it ends. */
export interface RunTable {
  run_id: string;
  project_id: string;
  app_id: string;
  function_name: string;
  /** The HTTP method it was called with: `POST`, or another for a custom runtime's route (default `POST`). */
  method: Generated<string>;
  /** One of `RUN_MODES` (`run_states.ts`): `sync`, `async`, `stream` or `websocket`. */
  mode: RunMode;
  /** One of `RUN_STATUSES` (`run_states.ts`): `queued`, `running`, `success`, `failure` or `cancelled`. */
  status: RunStatus;
  created_at: number;
  started_at: number | null;
  completed_at: number | null;
  queue_time_ms: number | null;
  run_time_ms: number | null;
  input_json: string | null;
  result_json: string | null;
  /** 1 once the result was removed after the result TTL. */
  result_expired: Generated<number>;
  /**
   * 1 when the result was larger than the stored-result limit: a stream's `result_json` holds the items
   * that fit, any other result is NULL.
   */
  result_truncated: Generated<number>;
  error_type: string | null;
  error_message: string | null;
  error_traceback: string | null;
  webhook_endpoint: string | null;
  /** The webhook secret sealed with the secret box, until the delivery takes it over. */
  webhook_secret: string | null;
  /** The endpoint's `user:password`, sealed, until the delivery takes it over; the endpoint is stored without it. */
  webhook_credentials: string | null;
  /** The process that owns the running run, and until when unless renewed. */
  lease_owner: string | null;
  lease_expires_at: number | null;
  /** 1 when a cancel was asked for while another process ran it. */
  cancel_requested: Generated<number>;
  /** The run this one ran again (`rerunOf`). */
  rerun_of: string | null;
  /** The deployment whose replica took the call; null for an app of the apps folder, or before one did. */
  deployment_id: string | null;
  /**
   * The lease owner whose run a stale-lease rescue ended `interrupted` (its lease had run out): the
   * record names the process it gave up on. That end stands: the owner, if it was alive after all, finds
   * the run ended and drops its own outcome. Null for any other end.
   */
  swept_owner: string | null;
  /**
   * Which holding of the run may end it: a claim and a lease rescue add one, and every end compares it
   * with the status in the statement that writes the end (a run ends once).
   */
  lease_generation: Generated<number>;
  /**
   * A WebSocket run's counters and close, as JSON (messages and bytes each way, close code and reason),
   * written with its end; null for every other run.
   */
  websocket_json: string | null;
}

/** The webhook outbox: one delivery per run, its exact body and (sealed) secret until it is settled. */
export interface WebhookDeliveryTable {
  run_id: string;
  endpoint: string;
  body: string;
  secret: string | null;
  /** The endpoint's `user:password`, sealed, until the delivery is settled. */
  credentials: string | null;
  /** `pending`, `delivered` or `failed`. */
  status: string;
  attempts: Generated<number>;
  next_attempt_at: number;
  lease_owner: string | null;
  lease_expires_at: number | null;
  created_at: number;
  /** The attempts it may make in all, when not the retry table's (a redelivery: one more). */
  attempt_limit: number | null;
  /** When its budget of redeliveries is full again (see `redelivery_limit.ts`); null: full. */
  redelivery_full_at: number | null;
}

/** One line of a run's output. */
export interface RunLogTable {
  run_id: string;
  /** From 1 per run; lines cut for the per-run limit leave a gap at the head. */
  seq: number;
  at: number;
  /** `stdout` or `stderr`. */
  stream: string;
  line: string;
}

/** One attempt of a webhook delivery. */
export interface WebhookAttemptTable {
  run_id: string;
  attempt: number;
  at: number;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
}

/** An `Idempotency-Key` seen for a project: the request's fingerprint and the run it made. */
export interface IdempotencyKeyTable {
  project_id: string;
  key: string;
  fingerprint: string;
  run_id: string;
  created_at: number;
}

/**
 * A key shared by the processes of a PostgreSQL store, sealed with the master key (`purpose` says what
 * it is for: `signing` holds an Ed25519 private JWK, `data` the 32-byte key of the secret box).
 */
export interface KeyTable {
  kid: string;
  purpose: "signing" | "data";
  /** The key sealed with the master key (AES-256-GCM); never the plaintext. */
  sealed: string;
  created_at: number;
  /** When it stopped signing or sealing; its tokens or sealed values may still need it. */
  retired_at: number | null;
}

/** A deploy bundle (a gzip tarball of an app folder), kept once by the SHA-256 of its bytes. */
export interface BundleTable {
  /** `sha256:<hex>` of `data`. */
  digest: string;
  size_bytes: number;
  /** The bytes of a bundle stored before migration 0021; empty for a bundle kept in `bundle_chunks`. */
  data: Uint8Array;
  created_at: number;
  /** How many rows of `bundle_chunks` hold the bytes; null for a bundle whose bytes are in `data`. */
  chunk_count: number | null;
}

/** One piece (about 1 MiB) of a bundle's bytes, in order of `idx` from 0. */
export interface BundleChunkTable {
  digest: string;
  idx: number;
  data: Uint8Array;
}

/** An app made by deploying (apps of the apps folder have no row). */
export interface AppTable {
  project_id: string;
  app_id: string;
  created_at: number;
  /** The deployment that serves calls; null before the first build succeeded. */
  active_deployment_id: string | null;
  /** Set when the app was deleted; deploying again brings it back. */
  deleted_at: number | null;
}

/** One deployment of an app: its bundle, its build's state and the process building it. */
export interface DeploymentTable {
  deployment_id: string;
  project_id: string;
  app_id: string;
  /** `queued`, `building`, `ready` or `failed`. */
  status: string;
  bundle_digest: string;
  size_bytes: number;
  /** `bundle` or `repository`. */
  source: string;
  /** For `repository`: `{owner, repo, ref, commit, path}`. */
  repository_json: string | null;
  base_image_digest: string | null;
  /** `new` or `cached`. */
  base_image_status: string | null;
  /** What its deployer said it is (`createDeployment`'s `message`). */
  message: string | null;
  /** The git commit its files come from, when known. */
  git_commit: string | null;
  /** 1 when its folder held changes `git_commit` does not. */
  git_dirty: Generated<number>;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  error: string | null;
  /** Its `runplane.toml` as its build read it; null until then (and for builds before migration 0025). */
  config_toml: string | null;
  /** The reference of the OCI image it runs in (`[build] base_image`); null: the host's system. */
  image_reference: string | null;
  /** That image's manifest digest (`sha256:<hex>`) as its build pulled it; null with `image_reference`. */
  image_digest: string | null;
  /** The process building it, and until when unless renewed. */
  lease_owner: string | null;
  lease_expires_at: number | null;
}

/** One line of a build's output. */
export interface DeploymentLogTable {
  deployment_id: string;
  seq: number;
  at: number;
  /** `stdout`, `stderr` or `build` (the build's own lines). */
  stream: string;
  line: string;
}

/** A dashboard session, from sign-in to sign-out or expiry (its token stays in the sealed cookie only). */
export interface DashboardSessionTable {
  id: string;
  /** The account whose token signed in (for diagnostics). */
  service_account_id: string;
  created_at: number;
  expires_at: number;
}

/** A WebSocket ticket of a cluster: its SHA-256 only (base64url), its app and expiry (issue 47). */
export interface WebSocketTicketTable {
  digest: string;
  project_id: string;
  app_id: string;
  expires_at: number;
}

/** A project volume's record (its files are on disk under `RUNPLANE_VOLUMES_DIR`). */
export interface VolumeTable {
  project_id: string;
  /** Lowercase letters, digits, `-` and `_`, starting with a letter (a folder's name). */
  name: string;
  /** Its hard limit in bytes. */
  size_bytes: number;
  created_at: number;
}

/** A project's secret: an environment variable of its replicas, the value sealed by the SecretBox. */
export interface ProjectSecretTable {
  project_id: string;
  /** An environment-variable name (`[A-Za-z_][A-Za-z0-9_]*`), never `RUNPLANE_*`. */
  name: string;
  /** The value sealed together with the project id and name; never the plaintext. */
  value_sealed: string;
  /** The value's size in UTF-8 bytes, for the project's total without opening the values. */
  value_bytes: number;
  created_at: number;
  updated_at: number;
}

/** The version of a project's secrets: raised in the transaction of every change. */
export interface ProjectSecretVersionTable {
  project_id: string;
  version: number;
  updated_at: number;
}

/** The deployment one server process serves for one app, kept fresh by that process's heartbeat. */
export interface ServedDeploymentTable {
  /** The process's lease owner id (`rp_…`, new at every start). */
  process_id: string;
  project_id: string;
  app_id: string;
  deployment_id: string;
  /** The process's host name. */
  host: string;
  /** When the process began serving this deployment. */
  since: number;
  /** The process's last heartbeat: a row not renewed for a while is a stopped process's. */
  seen_at: number;
}

/** A server process as a host of the cluster, kept fresh by its heartbeat. */
export interface HostTable {
  /** The process's id (new at every start). */
  host_id: string;
  /** Its advertised base URL, where other hosts forward calls. */
  url: string;
  /** CPUs it offers replicas. */
  cpu: number;
  /** Memory it offers replicas, in bytes. */
  memory_bytes: number;
  /** GPUs it offers replicas. */
  gpus: number;
  started_at: number;
  /** Its last heartbeat: a row not renewed for a lease is a stopped host's. */
  seen_at: number;
}

/** The state of a replica seat's replica. */
export type ReplicaSeatState = "starting" | "ready";

/**
 * A seat: the right to run one replica of an app (seats 0 to `max_replicas - 1`), held by one host. The
 * primary key makes the cluster-wide count of an app's replicas a unique constraint.
 */
export interface ReplicaSeatTable {
  project_id: string;
  app_id: string;
  seat: number;
  /** The host holding it (a `hosts` row, not enforced: the rows expire apart). */
  host_id: string;
  state: ReplicaSeatState;
  /** Calls the replica takes at once (the app's `replica_concurrency`). */
  slots: number;
  /** Calls in flight on it at the last report. */
  busy: number;
  claimed_at: number;
  /** The holder's last renewal: a seat not renewed for a lease may be claimed by another host. */
  seen_at: number;
}

/** What one host saw of an app in one minute (`app_samples`, migration 0034): for its charts. */
export interface AppSampleTable {
  project_id: string;
  app_id: string;
  host_id: string;
  /** The minute's start, Unix ms. */
  minute: number;
  /** The most replicas of the app the host ran at once in that minute. */
  replicas: number;
  /** Replicas of the app the host started in that minute. */
  starts: number;
}

/** A process's probe of whether the store can write (see `outage.ts`). */
export interface StoreProbeTable {
  owner: string;
  written_at: number;
}

/** Every table of the store. */
export interface Database {
  store_probes: StoreProbeTable;
  projects: ProjectTable;
  service_accounts: ServiceAccountTable;
  base_image_digests: BaseImageDigestTable;
  project_integrations: ProjectIntegrationTable;
  runs: RunTable;
  webhook_deliveries: WebhookDeliveryTable;
  webhook_attempts: WebhookAttemptTable;
  idempotency_keys: IdempotencyKeyTable;
  keys: KeyTable;
  bundles: BundleTable;
  bundle_chunks: BundleChunkTable;
  apps: AppTable;
  deployments: DeploymentTable;
  deployment_logs: DeploymentLogTable;
  run_logs: RunLogTable;
  dashboard_sessions: DashboardSessionTable;
  websocket_tickets: WebSocketTicketTable;
  project_secrets: ProjectSecretTable;
  project_secret_versions: ProjectSecretVersionTable;
  volumes: VolumeTable;
  served_deployments: ServedDeploymentTable;
  hosts: HostTable;
  replica_seats: ReplicaSeatTable;
  app_samples: AppSampleTable;
}
