/**
 * The custom runtime: an app's own HTTP server, started from its entrypoint with `PORT` beside the relay
 * (`_relay.py`) in its sandbox, and reached only through the relay's Unix socket in a folder the server
 * hands in; watched by its health check. Calls are forwarded by `proxyCall`.
 */
import type { ChildProcess } from "node:child_process";
import { rm } from "node:fs/promises";
import { connect } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Writable } from "node:stream";
import { Agent, fetch } from "undici";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import { AppStartError } from "./_failures.ts";
import type { JailSpec, ReplicaCgroup, Sandbox } from "../sandbox/mod.ts";
import { freePort } from "./free_port.ts";
import { hostPythonInImage } from "./_host_python.ts";
import { signalGroup, spawnInOwnGroup, stopReplicaProcess } from "./_process_group.ts";
import type { CallOutcome } from "./_outcome.ts";
import { proxyReplicaCall } from "./_replica_proxy.ts";
import type { CallableReplica, ReplicaCall } from "./_replica.ts";
import { openUpstreamWebSocket, type UpstreamWebSocketOptions } from "./_websocket_upstream.ts";

const RELAY_PATH = fileURLToPath(new URL("./_relay.py", import.meta.url));
const START_TIMEOUT_MS = 30_000;
const HEALTH_INTERVAL_MS = 2_000;
const HEALTH_TIMEOUT_MS = 2_000;
const STOP_GRACE_MS = 2_000;
/** The port a jailed app listens on when it names none: each replica has a network namespace of its own. */
const JAILED_DEFAULT_PORT = 8080;

/** Options of `CustomProcessReplica`. */
export interface CustomProcessOptions {
  appDir: string;
  label: string;
  entrypoint: string[];
  port?: number;
  healthcheckEndpoint?: string;
  /** Answers 2xx once the app can take calls: until then no call is routed to the replica. */
  readycheckEndpoint?: string;
  logger: Logger;
  sandbox: Sandbox;
  jail: JailSpec;
  /** The replica's cgroup: its limits, and whether the kernel killed a process of it at its memory limit. */
  cgroup?: ReplicaCgroup;
  /** Makes the app's files ready on this host before the process starts (see `PythonReplicaOptions`). */
  prepare?(): Promise<void>;
}

/** Asks the relay whether the app's port accepts a connection (one byte back: "1" or "0"). */
function portAccepts(socketDir: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(join(socketDir, "probe.sock"));
    let answer = "";
    socket.setTimeout(HEALTH_TIMEOUT_MS + 500);
    socket.setEncoding("utf8").on("data", (text: string) => (answer += text));
    socket.once("close", () => resolve(answer === "1"));
    socket.once("error", () => resolve(false));
    socket.once("timeout", () => socket.destroy());
  });
}

let replicaCount = 0;

/** One process of a custom runtime, restarted by its pool when it exits or fails its health check. */
export class CustomProcessReplica implements CallableReplica {
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;
  wasReady = false;
  usable = true;
  /** The host part is a placeholder: every request goes through the relay's socket. */
  readonly baseUrl = "http://app.runplane.internal";
  /** How to reach `baseUrl`: the relay's Unix socket (known once the process started). */
  dispatcher: Agent | undefined;
  #socketDir = "";
  #sealed = false;
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

  /**
   * The memory limit, in bytes, when the kernel killed a process of the replica at it (a broken call is
   * then said to be out of memory); undefined otherwise.
   */
  oomLimit(): number | undefined {
    const cgroup = this.#options.cgroup;
    return cgroup?.oomKilled() ? cgroup.limits.memoryBytes : undefined;
  }

  /** Forwards the call to the app's server through the relay (`proxyCall`); a broken one may be out of memory. */
  call(call: ReplicaCall): Promise<CallOutcome> {
    return proxyReplicaCall(call, {
      baseUrl: this.baseUrl,
      dispatcher: this.dispatcher,
      oomLimit: () => this.oomLimit(),
    });
  }

  /**
   * Opens a WebSocket to the app's server at `/<path>` through the relay (issue 47): resolves once the app
   * accepted the upgrade (see `openUpstreamWebSocket`).
   */
  openWebSocket(
    path: string,
    options: Omit<UpstreamWebSocketOptions, "socketPath">,
  ): ReturnType<typeof openUpstreamWebSocket> {
    return openUpstreamWebSocket(path, { ...options, socketPath: join(this.#socketDir, "http.sock") });
  }

  /** Whether `endpoint` answers 2xx (without one, whether the app's port accepts a connection). */
  async #answers(endpoint: string | undefined): Promise<boolean> {
    // Nothing is sent through the relay's sockets before the folder is sealed (see `Sandbox.sealSocketDir`).
    this.#sealed ||= await this.#options.sandbox.sealSocketDir(this.#socketDir, ["http.sock", "probe.sock"]);
    if (!this.#sealed) return false;
    if (!endpoint) return portAccepts(this.#socketDir);
    try {
      const response = await fetch(`${this.baseUrl}${endpoint}`, {
        dispatcher: this.dispatcher,
        signal: AbortSignal.timeout(HEALTH_TIMEOUT_MS),
      });
      await response.body?.cancel();
      return response.ok;
    } catch {
      return false;
    }
  }

  /** Awaits the `prepare` option; a replica that cannot start (or was stopped meanwhile) is gone at once. */
  async #prepare(): Promise<void> {
    let failure: string | undefined;
    try {
      await this.#options.prepare?.();
      if (this.#stopped) failure = "stopped before it started";
    } catch (error) {
      failure = (error as Error).message;
    }
    if (failure === undefined) return;
    this.usable = false;
    this.#resolveExited();
    throw new ProblemError("app-unavailable", `${this.#options.label}: ${failure}`);
  }

  async #start(): Promise<void> {
    const { label, logger, sandbox } = this.#options;
    await this.#prepare();
    const jailed = sandbox.status.jailed;
    // Jailed, every replica has its own network namespace and the same port; unjailed they share the host's.
    const port = this.#options.port ?? (jailed ? JAILED_DEFAULT_PORT : await freePort());
    this.#socketDir = await sandbox.socketDir(this.#options.jail.projectId, `custom-${++replicaCount}`);
    this.dispatcher = new Agent({ connect: { socketPath: join(this.#socketDir, "http.sock") } });
    const parentPid = jailed ? 0 : process.pid;
    // In an image the relay is the host's python3 (_host_python.ts): the image may have none.
    const [python, ...pythonArgs] = this.#options.jail.image ? hostPythonInImage() : ["python3"];
    const { child, exited, lastOutput } = spawnInOwnGroup(
      python,
      [...pythonArgs, RELAY_PATH, this.#socketDir, String(port), String(parentPid), "--", ...this.#options.entrypoint],
      {
        sandbox,
        jail: {
          ...this.#options.jail,
          readOnly: [...(this.#options.jail.readOnly ?? []), RELAY_PATH],
          writable: [...(this.#options.jail.writable ?? []), this.#socketDir],
          env: { ...this.#options.jail.env, PORT: String(port), PYTHONUNBUFFERED: "1" },
        },
        extraPipes: 1,
        logger,
        label,
        cgroup: this.#options.cgroup,
      },
    );
    this.#child = child;
    (child.stdio[3] as Writable | null)?.on("error", () => undefined);
    let exitReason = "";
    void exited.then(({ reason }) => {
      exitReason = reason;
      this.usable = false;
      clearInterval(this.#health);
      void this.dispatcher?.close().catch(() => undefined);
      void rm(this.#socketDir, { recursive: true, force: true });
      this.#resolveExited();
    });
    const deadline = Date.now() + START_TIMEOUT_MS;
    let gone = false;
    void exited.then(() => (gone = true));
    // Routing waits for the ready endpoint when the app names one, else for its health check.
    const { readycheckEndpoint, healthcheckEndpoint } = this.#options;
    while (!(await this.#answers(readycheckEndpoint ?? healthcheckEndpoint))) {
      if (gone) {
        throw new AppStartError(
          `${label}: the entrypoint exited while starting (${exitReason}); check runtime.custom.entrypoint`,
          lastOutput(),
        );
      }
      if (Date.now() > deadline) {
        signalGroup(child, "SIGKILL");
        const within = `within ${START_TIMEOUT_MS / 1000} s`;
        throw new AppStartError(
          readycheckEndpoint
            ? `${label}: its readycheck_endpoint ${readycheckEndpoint} did not answer 2xx on port ${port} ${within}; the server must listen on $PORT and answer it once ready`
            : `${label}: no health check answered on port ${port} ${within}; the server must listen on $PORT`,
          lastOutput(),
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    this.wasReady = true;
    this.#watchHealth();
  }

  #watchHealth(): void {
    let failures = 0;
    let checking = false;
    this.#health = setInterval(async () => {
      if (checking || this.#stopped) return;
      checking = true;
      failures = (await this.#answers(this.#options.healthcheckEndpoint)) ? 0 : failures + 1;
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
    // The relay passes SIGTERM to the app; past the grace period the whole group is killed.
    await stopReplicaProcess({ child, exited: this.exited }, {
      graceMs: STOP_GRACE_MS,
      ask: () => (child.stdio[3] as Writable | null)?.end(),
    });
  }
}
