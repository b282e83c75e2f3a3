/**
 * An app version's template: a Python process in the app's jail (with a cgroup of its own) that imported
 * the `[runtime] preload` modules and main.py once, and forks replicas on request (`_worker.py
 * --template`). A forked replica connects back over the template's Unix socket, is moved into its own
 * cgroup by the server, and then speaks the worker protocol on that socket. Forked replicas share the
 * template's jail (the same tenant's code, the same files); they die with it, so it outlives them.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { chmod, rm } from "node:fs/promises";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import type { ReplicaCgroup } from "../sandbox/mod.ts";
import { type ProcessExit, signalGroup, spawnInOwnGroup, stopReplicaProcess } from "./_process_group.ts";
import { memoryText } from "./_failures.ts";
import { hostPidOf, moveIntoCgroup } from "./_process_tree.ts";
import { currentHarness } from "./_harness_bytecode.ts";
import { type WorkerProcess, workerArgs, workerDescriptors, workerJail, type WorkerSpec } from "./_worker_process.ts";

/** How long a fork may take to connect back before it is killed and its replica fails to start. */
const FORK_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 2_000;
/** The first line a forked replica sends on its socket is short; a longer one is refused. */
const MAX_HELLO_BYTES = 4096;

/** Thrown by `fork` when the template cannot fork (unsafe, failed to load, gone): cold-start instead. */
export class TemplateRefused extends Error {
  /** `unsafe`: a fork would copy a broken state; `load`: the import failed; `gone`: the process ended. */
  constructor(message: string, readonly kind: "unsafe" | "load" | "gone") {
    super(message);
    this.name = "TemplateRefused";
  }
}

/** Options of `ReplicaTemplate`. */
export interface ReplicaTemplateOptions extends WorkerSpec {
  /** The template's own cgroup (the app's limits); removed by the caller once `exited` resolves. */
  cgroup?: ReplicaCgroup;
}

/** What `fork` gives a replica. */
export interface ForkOptions {
  /** The replica's own cgroup, which its process joins before it serves. */
  cgroup?: ReplicaCgroup;
  /** Variables set in the forked process before it serves (its GPUs, say). */
  env?: Record<string, string>;
  /** How many extra channels it serves (`WorkerProcess.channels`): that many more connections. */
  channels?: number;
}

interface PendingFork {
  innerPid?: number;
  /** Its two connections (`requests`, `messages`) as they arrive, then its extra channels (`c0`, …). */
  sockets: Partial<Record<"requests" | "messages", Socket>>;
  channels: Array<Socket | undefined>;
  options: ForkOptions;
  resolve(worker: WorkerProcess): void;
  reject(error: Error): void;
  timer: ReturnType<typeof setTimeout>;
}

type TemplateMessage =
  | { op: "template"; pid: number; unsafe: string | null }
  | { op: "load_error"; type: string; message: string }
  | { op: "forked"; id: string; pid: number }
  | { op: "exited"; pid: number; reason: string };

/** One app version's template process; `fork()` a replica from it. */
export class ReplicaTemplate {
  /** Resolves once it imported the app and may fork; rejects with `TemplateRefused` when it may not. */
  readonly loaded: Promise<void>;
  /** Resolves once the template's process is gone. */
  readonly exited: Promise<ProcessExit>;
  readonly #options: ReplicaTemplateOptions;
  readonly #pending = new Map<string, PendingFork>();
  /** Forked replicas' processes by their pid in the template's view. */
  readonly #forks = new Map<number, ForkedWorker>();
  #requests: Writable | undefined;
  #rootPid: number | undefined;
  #server: Server | undefined;
  #socketPath = "";
  /** The folder of its socket, once made. */
  #socketDir: string | undefined;
  #gone = false;
  /** Whether it imported the app and was found safe to fork. */
  wasLoaded = false;

  constructor(options: ReplicaTemplateOptions) {
    this.#options = options;
    let loaded!: { resolve(): void; reject(error: Error): void };
    this.loaded = new Promise((resolve, reject) => (loaded = { resolve, reject }));
    this.loaded.then(() => (this.wasLoaded = true), () => undefined);
    // A template that could not even start (its socket could not be made) exits at once, with that reason.
    const started = this.#start(loaded).catch((error: Error): ProcessExit => ({
      reason: `it could not start: ${error.message}`,
      outOfMemory: false,
    }));
    this.exited = started.then((exit) => {
      this.#gone = true;
      loaded.reject(new TemplateRefused(`its template exited (${exit.reason})`, "gone"));
      for (const pending of this.#pending.values()) {
        pending.reject(new TemplateRefused(`its template exited (${exit.reason})`, "gone"));
      }
      for (const fork of this.#forks.values()) fork.onExit(`its template exited (${exit.reason})`);
      this.#server?.close();
      // Only the folder it made: none when it failed before making one.
      if (this.#socketDir) void rm(this.#socketDir, { recursive: true, force: true });
      return exit;
    });
  }

  /** Whether it may still fork (its process lives and nothing refused it). */
  get usable(): boolean {
    return !this.#gone;
  }

  /** Forked replicas alive now. */
  get forks(): number {
    return this.#forks.size + this.#pending.size;
  }

  async #start(loaded: { resolve(): void; reject(error: Error): void }): Promise<ProcessExit> {
    const { options } = { options: this.#options };
    const dir = await options.sandbox.socketDir(options.jail.projectId, `template-${randomBytes(6).toString("hex")}`);
    this.#socketDir = dir;
    this.#socketPath = join(dir, "fork.sock");
    this.#server = createServer((socket) => this.#onConnection(socket));
    await new Promise<void>((resolve, reject) => {
      this.#server!.once("error", reject);
      this.#server!.listen(this.#socketPath, resolve);
    });
    // The forked replica runs as the project's uid when the server is root.
    await chmod(this.#socketPath, 0o666);
    // Closed while it was getting ready (a replica stopped as it started): no process to stop later.
    if (this.#gone) return { reason: "closed before its process started", outOfMemory: false };
    const harness = currentHarness();
    const jail = workerJail({ ...options.jail, writable: [...(options.jail.writable ?? []), dir] }, harness);
    const { networkFd, extraPipes } = workerDescriptors(0);
    const { child, exited } = spawnInOwnGroup(
      options.python,
      workerArgs(options.appDir, {
        harness,
        concurrency: options.concurrency,
        preload: options.preload,
        batch: options.batch,
        template: true,
        unjailed: !options.sandbox.status.jailed,
        networkFd,
      }),
      {
        sandbox: options.sandbox,
        jail,
        extraPipes,
        logger: options.logger,
        label: `${options.label} template`,
        cgroup: options.cgroup,
        networkGate: networkFd,
      },
    );
    this.#rootPid = child.pid;
    this.#requests = child.stdio[3] as Writable;
    this.#requests.on("error", () => undefined);
    this.#readMessages(child.stdio[4] as Readable, loaded);
    this.#stop = () =>
      stopReplicaProcess({ child, exited }, { graceMs: STOP_GRACE_MS, ask: () => this.#requests!.end() });
    this.#killAll = () => signalGroup(child, "SIGKILL");
    return exited;
  }

  #stop: () => Promise<void> = () => Promise.resolve();
  #killAll: () => void = () => undefined;

  #readMessages(pipe: Readable, loaded: { resolve(): void; reject(error: Error): void }): void {
    let partial = "";
    pipe.setEncoding("utf8").on("data", (text: string) => {
      const lines = (partial + text).split("\n");
      partial = lines.pop()!;
      if (partial.length > 1024 * 1024) this.#killAll();
      for (const line of lines) {
        let message: TemplateMessage;
        try {
          message = JSON.parse(line) as TemplateMessage;
        } catch {
          this.#killAll();
          return;
        }
        this.#onMessage(message, loaded);
      }
    });
  }

  #onMessage(message: TemplateMessage, loaded: { resolve(): void; reject(error: Error): void }): void {
    switch (message.op) {
      case "template":
        if (message.unsafe === null) return loaded.resolve();
        return loaded.reject(new TemplateRefused(String(message.unsafe), "unsafe"));
      case "load_error":
        return loaded.reject(new TemplateRefused(`main.py failed to load in the template: ${message.message}`, "load"));
      case "forked": {
        const pending = this.#pending.get(message.id);
        if (pending) pending.innerPid = message.pid;
        return;
      }
      case "exited": {
        this.#forks.get(message.pid)?.onExit(message.reason);
        this.#forks.delete(message.pid);
        for (const [id, pending] of this.#pending) {
          if (pending.innerPid !== message.pid) continue;
          this.#pending.delete(id);
          clearTimeout(pending.timer);
          pending.reject(new Error(`the forked replica exited before it connected (${message.reason})`));
        }
        this.#afterForkEnded();
        return;
      }
    }
  }

  /** Called when the last fork is gone (the keeper decides whether the template stays). */
  onIdle: () => void = () => undefined;

  #afterForkEnded(): void {
    if (this.forks === 0) this.onIdle();
  }

  /** Forks a replica; rejects with `TemplateRefused` when the template may not fork (cold-start then). */
  async fork(options: ForkOptions = {}): Promise<WorkerProcess> {
    await this.loaded;
    if (this.#gone) throw new TemplateRefused("its template is gone", "gone");
    const id = randomUUID();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const pending = this.#pending.get(id);
        if (!pending) return;
        this.#pending.delete(id);
        if (pending.innerPid !== undefined) this.kill(pending.innerPid);
        reject(new Error(`the forked replica did not connect within ${FORK_TIMEOUT_MS / 1000} s`));
        this.#afterForkEnded();
      }, FORK_TIMEOUT_MS);
      const channels = options.channels ?? 0;
      // The fork connects back a few milliseconds later (15–25 ms on a slow hour), then is moved into its
      // cgroup: that move's wait starts now.
      options.cgroup?.primeJoin?.();
      this.#pending.set(id, {
        options,
        sockets: {},
        channels: new Array(channels).fill(undefined),
        resolve,
        reject,
        timer,
      });
      this.#requests!.write(
        `${JSON.stringify({ op: "fork", id, socket: this.#socketPath, env: options.env ?? {}, channels })}\n`,
      );
    });
  }

  /** Kills a forked replica's process group (by its pid in the template's view). */
  kill(innerPid: number): void {
    if (!this.#gone) this.#requests?.write(`${JSON.stringify({ op: "kill", pid: innerPid })}\n`);
  }

  /** Stops the template (and with it any fork still alive). */
  async close(): Promise<void> {
    this.#gone = true;
    await this.#stop();
    await this.exited;
  }

  #onConnection(socket: Socket): void {
    socket.on("error", () => undefined);
    let hello = "";
    const onData = (chunk: Buffer) => {
      hello += chunk.toString("latin1");
      const newline = hello.indexOf("\n");
      if (newline < 0) {
        if (hello.length > MAX_HELLO_BYTES) socket.destroy();
        return;
      }
      socket.off("data", onData);
      socket.pause();
      void this.#attach(socket, hello.slice(0, newline)).catch((error: Error) => {
        this.#options.logger.warn({ app: this.#options.label, err: error }, "a forked replica could not be attached");
        socket.destroy();
      });
    };
    socket.on("data", onData);
  }

  async #attach(socket: Socket, line: string): Promise<void> {
    const hello = JSON.parse(line) as { op?: string; id?: string; pid?: number; channel?: string };
    const pending = hello.op === "hello" && typeof hello.id === "string" ? this.#pending.get(hello.id) : undefined;
    const channel = hello.channel === "requests" || hello.channel === "messages" ? hello.channel : undefined;
    const extra = /^c(\d{1,3})$/.exec(hello.channel ?? "");
    const index = extra ? Number(extra[1]) : -1;
    if (
      !pending || typeof hello.pid !== "number"
      || (channel ? pending.sockets[channel] : !(index < pending.channels.length && !pending.channels[index]))
    ) {
      throw new Error("an unknown process connected to the template's socket");
    }
    if (channel) pending.sockets[channel] = socket;
    else pending.channels[index] = socket;
    const { requests, messages } = pending.sockets;
    if (!requests || !messages || pending.channels.includes(undefined)) return;
    this.#pending.delete(hello.id!);
    clearTimeout(pending.timer);
    const innerPid = hello.pid;
    const hostPid = this.#rootPid === undefined ? undefined : hostPidOf(this.#rootPid, innerPid);
    const { cgroup } = pending.options;
    const onOutOfMemory = () =>
      this.#options.logger.warn({ app: this.#options.label, pid: hostPid }, "replica killed at its memory limit");
    const channels = pending.channels as Socket[];
    const worker = new ForkedWorker({
      requests,
      messages,
      channels,
      template: this,
      innerPid,
      hostPid,
      cgroup,
      onOutOfMemory,
    });
    // Known to the template before the move is awaited: an exit meanwhile reaches the worker.
    this.#forks.set(innerPid, worker);
    if (cgroup) {
      const problem = hostPid === undefined
        ? "its host pid was not found"
        : await moveIntoCgroup(hostPid, cgroup.procsFiles);
      if (problem) {
        this.#options.logger.warn(
          { app: this.#options.label, pid: innerPid, problem },
          "a forked replica stays in its template's cgroup",
        );
      }
    }
    requests.write("start\n");
    // Nothing comes on the requests socket; read it so that its end (the process's exit) is seen.
    requests.resume();
    messages.resume();
    pending.resolve(worker);
  }
}

/** A forked replica's process: its socket carries the worker protocol; its template watches and kills it. */
class ForkedWorker implements WorkerProcess {
  readonly origin = "fork";
  readonly exited: Promise<ProcessExit>;
  readonly requests: Socket;
  readonly messages: Socket;
  readonly channels: readonly Socket[];
  readonly #template: ReplicaTemplate;
  readonly #innerPid: number;
  readonly #hostPid: number | undefined;
  #ended = false;
  #onExit: (reason: string) => void = () => undefined;

  constructor(options: {
    requests: Socket;
    messages: Socket;
    channels: Socket[];
    template: ReplicaTemplate;
    innerPid: number;
    hostPid: number | undefined;
    cgroup?: ReplicaCgroup;
    onOutOfMemory(): void;
  }) {
    this.requests = options.requests;
    this.messages = options.messages;
    this.channels = options.channels;
    this.#template = options.template;
    this.#innerPid = options.innerPid;
    this.#hostPid = options.hostPid;
    const closed = (socket: Socket) => new Promise<void>((resolve) => socket.once("close", () => resolve()));
    const ended = new Promise<string>((resolve) => (this.#onExit = resolve));
    this.exited = Promise.all([ended, closed(this.requests), closed(this.messages)]).then(([reason]) => {
      this.#ended = true;
      const outOfMemory = options.cgroup?.oomKilled() ?? false;
      if (!outOfMemory) return { reason, outOfMemory };
      options.onOutOfMemory();
      const limit = memoryText(options.cgroup!.limits.memoryBytes);
      return { reason: `killed at its memory limit of ${limit}, ${reason}`, outOfMemory };
    });
  }

  get pid(): number | undefined {
    return this.#hostPid;
  }

  /** The template saw its process end (or the template itself ended). */
  onExit(reason: string): void {
    this.#ended = true;
    this.#onExit(reason);
    // What it wrote before it ended is still read; a process it left behind holding the socket is not waited for.
    setTimeout(() => {
      this.requests.destroy();
      this.messages.destroy();
    }, 1000).unref();
  }

  hasExited(): boolean {
    return this.#ended;
  }

  kill(): void {
    this.#template.kill(this.#innerPid);
  }

  async stop(graceMs: number): Promise<void> {
    this.requests.end();
    const timer = setTimeout(() => this.kill(), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}
