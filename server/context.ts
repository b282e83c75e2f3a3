/** What the handlers share: the server's settings and its domain services. */
import type { SigningKey, SigningKeys, WebSocketTickets } from "./auth/mod.ts";
import type { ClusterView, ForwardKey } from "./cluster/mod.ts";
import type { Config } from "./config.ts";
import type { Deployments } from "./deployments/mod.ts";
import type { GpuInventory } from "./gpus/mod.ts";
import type { RepositoryTrees } from "./integrations/mod.ts";
import type { Logger } from "./log.ts";
import type { Metrics } from "./metrics/mod.ts";
import type { ProjectSecrets } from "./project_secrets/mod.ts";
import type { Runtime } from "./runtime/mod.ts";
import type { RunChangeFeed, RunService } from "./runs/mod.ts";
import type { CgroupStatus, SandboxStatus } from "./sandbox/mod.ts";
import type { SecretBox } from "./secrets/mod.ts";
import type { Store } from "./store/mod.ts";
import type { Volumes } from "./volumes/mod.ts";
import type { HostVolumes } from "./volumes/host_volumes.ts";

/** Why the server is not ready, if it is not. */
export interface Readiness {
  /** Empty when ready; otherwise each reason, e.g. `apps are loading`, `draining`. */
  reasons(): Promise<string[]>;
}

/** The services a handler may call. */
export interface ServerContext {
  config: Config;
  store: Store;
  /** The key new tokens are signed with (`signingKeys.current`). */
  key: SigningKey;
  /** Every key whose tokens are accepted, found by `kid`; the JWKS lists those that may have live tokens. */
  signingKeys: SigningKeys;
  logger: Logger;
  readiness: Readiness;
  metrics: Metrics;
  /** Seals secrets kept at rest (webhook secrets, GitHub tokens). */
  secrets: SecretBox;
  /** Repository file trees from each project's provider, cached by commit. */
  trees: RepositoryTrees;
  /** Whether tenants' code runs jailed here, and what is missing (shown by `/readyz`). */
  sandbox: SandboxStatus;
  /** Whether replicas are limited by cgroups here, with which version, and what is missing (shown by `/readyz`). */
  cgroups: CgroupStatus;
  /** The host's GPUs as read at start, where from, and what was wrong (shown by `/readyz`). */
  gpus: GpuInventory;
  /** Deployed apps and their replicas: runs functions. */
  runtime: Runtime;
  /** Run records, submitting calls, the async dispatcher, cancel. */
  runs: RunService;
  /** This process's WebSocket tickets (`createWebSocketTicket`; consumed by the upgrade). */
  websocketTickets: WebSocketTickets;
  /** Each run's creation, start and end, from every process: the dashboard's live updates. */
  runChanges: RunChangeFeed;
  /** Deployments and deployed apps: bundles, builds, activation. */
  deployments: Deployments;
  /** Each project's secrets: sealed at rest, its replicas' environment variables. */
  projectSecrets: ProjectSecrets;
  /** Each project's volumes: records in the store, files on this host's volumes folder. */
  volumes: Volumes;
  /** What this host's replicas are shown of them, and the volumes it cannot see (shown by `/readyz`). */
  hostVolumes: HostVolumes;
  /**
   * Signs calls forwarded to another host (`forwardCall`) and verifies the ones forwarded here; derived
   * from the master key, so null without one (a single process on SQLite forwards nothing).
   */
  forwardKey: ForwardKey | null;
  /** This process as a host: its id (new at every start, as `served_by[].process_id`) and `RUNPLANE_ADVERTISE_URL`. */
  host: { id: string; url: string | null };
  /**
   * The cluster's cached view (hosts and replica seats, up to a heartbeat old) on a cluster host;
   * null on a process that is not part of a cluster (it counts its replicas by itself).
   */
  cluster: { view(): ClusterView } | null;
}
