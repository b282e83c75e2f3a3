/**
 * The custom runtime: an app's own HTTP server, started from its entrypoint with `PORT` and watched by
 * its health check, or an external URL. Calls are forwarded by `proxyCall`.
 */
import type { ChildProcess } from "node:child_process";
import { connect } from "node:net";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import { freePort } from "./free_port.ts";
import { orphanGuarded } from "./_orphan_guard.ts";
import { signalGroup, spawnInOwnGroup, stopReplicaProcess } from "./_process_group.ts";
import type { Replica } from "./_replica_pool.ts";

const START_TIMEOUT_MS = 30_000;
const HEALTH_INTERVAL_MS = 2_000;
const HEALTH_TIMEOUT_MS = 2_000;
const STOP_GRACE_MS = 2_000;

/** Options of `CustomProcessReplica`. */
export interface CustomProcessOptions {
  appDir: string;
  label: string;
  entrypoint: string[];
  port?: number;
  healthcheckEndpoint?: string;
  logger: Logger;
}

/** Something calls can be forwarded to. */
export interface Upstream extends Replica {
  /** The base URL, without a trailing slash; known once `ready` resolved. */
  readonly baseUrl: string;
}

function tcpReachable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: "127.0.0.1" });
    socket.setTimeout(HEALTH_TIMEOUT_MS);
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
    socket.once("timeout", () => {
      socket.destroy();
      resolve(false);
    });
  });
}

async function healthy(port: number, endpoint: string | undefined): Promise<boolean> {
  if (!endpoint) return tcpReachable(port);
  try {
    const response = await fetch(`http://127.0.0.1:${port}${endpoint}`, {
      signal: AbortSignal.timeout(HEALTH_TIMEOUT_MS),
    });
    await response.body?.cancel();
    return response.ok;
  } catch {
    return false;
  }
}

/** One process of a custom runtime, restarted by its pool when it exits or fails its health check. */
export class CustomProcessReplica implements Upstream {
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;
  wasReady = false;
  usable = true;
  baseUrl = "";
  #child: ChildProcess | undefined;
  #resolveExited!: () => void;
  #stopped = false;
  #health: ReturnType<typeof setInterval> | undefined;
  readonly #options: CustomProcessOptions;

  constructor(options: CustomProcessOptions) {
    this.#options = options;
    this.exited = new Promise((resolve) => (this.#resolveExited = resolve));
    this.ready = this.#start();
  }

  get pid(): number | undefined {
    return this.#child?.pid;
  }

  async #start(): Promise<void> {
    const { label, logger } = this.#options;
    const port = this.#options.port ?? (await freePort());
    this.baseUrl = `http://127.0.0.1:${port}`;
    const [entry, ...entryArgs] = this.#options.entrypoint;
    const { command, args, env } = orphanGuarded(entry, entryArgs);
    const { child, exited } = spawnInOwnGroup(command, args, {
      cwd: this.#options.appDir,
      env: { ...env, PORT: String(port), PYTHONUNBUFFERED: "1" },
      logger,
      label,
    });
    this.#child = child;
    let exitReason = "";
    void exited.then((reason) => {
      exitReason = reason;
      this.usable = false;
      clearInterval(this.#health);
      this.#resolveExited();
    });
    const deadline = Date.now() + START_TIMEOUT_MS;
    let gone = false;
    void exited.then(() => (gone = true));
    while (!(await healthy(port, this.#options.healthcheckEndpoint))) {
      if (gone) {
        throw new ProblemError(
          "app-unavailable",
          `${label}: the entrypoint exited while starting (${exitReason}); check runtime.custom.entrypoint`,
        );
      }
      if (Date.now() > deadline) {
        signalGroup(child, "SIGKILL");
        throw new ProblemError(
          "app-unavailable",
          `${label}: no health check answered on port ${port} within ${
            START_TIMEOUT_MS / 1000
          } s; the server must listen on $PORT`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    this.wasReady = true;
    this.#watchHealth(port);
  }

  #watchHealth(port: number): void {
    let failures = 0;
    let checking = false;
    this.#health = setInterval(async () => {
      if (checking || this.#stopped) return;
      checking = true;
      failures = (await healthy(port, this.#options.healthcheckEndpoint)) ? 0 : failures + 1;
      checking = false;
      if (failures >= 2 && !this.#stopped) {
        this.#options.logger.warn(
          { app: this.#options.label, pid: this.pid },
          "custom runtime failed its health check; restarting it",
        );
        this.usable = false;
        if (this.#child) signalGroup(this.#child, "SIGKILL");
      }
    }, HEALTH_INTERVAL_MS);
    this.#health.unref();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#health);
    if (!this.#child) {
      await this.ready.catch(() => undefined);
    }
    const child = this.#child;
    if (!child) return;
    // The whole group: the processes the runtime started itself stop with it.
    await stopReplicaProcess({ child, exited: this.exited }, {
      graceMs: STOP_GRACE_MS,
      ask: () => signalGroup(child, "SIGTERM"),
    });
  }
}
