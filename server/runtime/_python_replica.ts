/**
 * One Python worker process running `_worker.py` over an app's `main.py`. Requests go down fd 3 and
 * messages come back on fd 4 (newline-delimited JSON); the function's stdout/stderr arrive as per-run
 * log messages, the process's own stdout/stderr are logged as worker output.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { Readable, Writable } from "node:stream";
import type { AbortSignalLike } from "../abort/mod.ts";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import { RunFailure } from "./_failures.ts";
import { ItemQueue } from "./_item_queue.ts";
import { OWN_PROCESS_GROUP, signalGroup } from "./_process_group.ts";
import type { Replica } from "./_replica_pool.ts";
import type { CallOutcome, StreamItem } from "./_outcome.ts";

const WORKER_PATH = fileURLToPath(new URL("./_worker.py", import.meta.url));
const START_TIMEOUT_MS = 60_000;
/** How long a cancelled call may take to stop before its worker is killed. */
const CANCEL_GRACE_MS = 1_000;
const STOP_GRACE_MS = 2_000;

/** Options of `PythonReplica`. */
export interface PythonReplicaOptions {
  appDir: string;
  label: string;
  python: string;
  concurrency: number;
  logger: Logger;
}

/** What the caller of `PythonReplica.call` provides. */
export interface PythonCall {
  runId: string;
  functionName: string;
  kwargs: Record<string, unknown>;
  graceMs: number;
  signal?: AbortSignalLike;
  /** Called once when the call is over in the worker (result, failure, stream end, cancel or crash). */
  onSettled(): void;
}

interface Pending {
  call: PythonCall;
  startedAt: number;
  settle(): void;
  resolve(outcome: CallOutcome): void;
  reject(error: unknown): void;
  stream?: ItemQueue<StreamItem>;
  failed?: RunFailure;
  cancelTimer?: ReturnType<typeof setTimeout>;
  /** Output not yet logged because its line is not complete. */
  partial: Record<string, string>;
}

type Message = { op: string; id?: string; [key: string]: unknown };

/** A warm Python worker; calls run concurrently up to the app's `replica_concurrency`. */
export class PythonReplica implements Replica {
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;
  wasReady = false;
  usable = true;
  readonly #child: ChildProcess;
  readonly #options: PythonReplicaOptions;
  readonly #pending = new Map<string, Pending>();
  #loadError: ProblemError | undefined;
  #corked = false;
  #exitCode: string | undefined;

  constructor(options: PythonReplicaOptions) {
    this.#options = options;
    this.#child = spawn(options.python, ["-u", WORKER_PATH, options.appDir, String(options.concurrency)], {
      cwd: options.appDir,
      ...OWN_PROCESS_GROUP,
      stdio: ["ignore", "pipe", "pipe", "pipe", "pipe"],
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1", PYTHONUNBUFFERED: "1" },
    });
    this.exited = new Promise((resolve) => {
      this.#child.once("close", (code, signal) => {
        this.#exitCode = signal ? `signal ${signal}` : `exit code ${code}`;
        this.usable = false;
        this.#onExit();
        resolve();
      });
    });
    this.ready = new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          new ProblemError(
            "app-unavailable",
            `${options.label}: the Python worker did not start within ${START_TIMEOUT_MS / 1000} s`,
          ),
        );
        signalGroup(this.#child, "SIGKILL");
      }, START_TIMEOUT_MS);
      this.#child.once("error", (error) => {
        clearTimeout(timer);
        reject(
          new ProblemError(
            "app-unavailable",
            `${options.label}: cannot start ${options.python} (${error.message}); check deployment.python`,
          ),
        );
      });
      void this.exited.then(() => {
        clearTimeout(timer);
        reject(
          this.#loadError
            ?? new ProblemError(
              "app-unavailable",
              `${options.label}: the Python worker exited while starting (${this.#exitCode})`,
            ),
        );
      });
      this.#onReady = () => {
        clearTimeout(timer);
        this.wasReady = true;
        resolve();
      };
    });
    this.#readMessages(this.#child.stdio[4] as Readable);
    for (const stream of ["stdout", "stderr"] as const) {
      this.#child[stream]!.setEncoding("utf8").on("data", (text: string) => {
        options.logger.info({ app: options.label, pid: this.pid, stream, text }, "worker output");
      });
    }
    // A write after the worker died must not crash the server.
    (this.#child.stdio[3] as Writable).on("error", () => undefined);
  }

  #onReady: () => void = () => undefined;

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** Runs a call; resolves with its result or its stream once the worker says which it is. */
  call(call: PythonCall): Promise<CallOutcome> {
    return new Promise((resolve, reject) => {
      let settled = false;
      const pending: Pending = {
        call,
        startedAt: performance.now(),
        partial: {},
        resolve,
        reject,
        settle: () => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          clearTimeout(pending.cancelTimer);
          call.signal?.removeEventListener("abort", onAbort);
          this.#pending.delete(call.runId);
          for (const [stream, text] of Object.entries(pending.partial)) {
            if (text) this.#logOutput(call.runId, stream, text);
          }
          call.onSettled();
        },
      };
      const timer = setTimeout(() => {
        const seconds = call.graceMs / 1000;
        this.#fail(
          pending,
          new RunFailure(
            "timeout",
            `The function ran longer than the app's response_grace_period (${seconds} s); its worker was killed`,
            { runId: call.runId },
          ),
        );
        this.#kill();
      }, call.graceMs);
      const onAbort = () => this.#cancel(pending);
      this.#pending.set(call.runId, pending);
      if (call.signal?.aborted) return onAbort();
      call.signal?.addEventListener("abort", onAbort, { once: true });
      this.#send({ op: "call", id: call.runId, run_id: call.runId, fn: call.functionName, kwargs: call.kwargs });
    });
  }

  /**
   * Closes the request pipe (the harness exits), then kills the worker's process group after a grace
   * period; processes the function started and left behind in the group go with it.
   */
  async stop(): Promise<void> {
    (this.#child.stdio[3] as Writable).end();
    const timer = setTimeout(() => signalGroup(this.#child, "SIGKILL"), STOP_GRACE_MS);
    await this.exited;
    clearTimeout(timer);
    signalGroup(this.#child, "SIGKILL");
  }

  #kill(): void {
    this.usable = false;
    signalGroup(this.#child, "SIGKILL");
  }

  #send(message: Message): void {
    const pipe = this.#child.stdio[3] as Writable;
    if (!pipe.writable) return;
    // Requests made in the same turn of the event loop leave in one write (one system call, one
    // wake-up of the worker's reader) instead of one each.
    if (!this.#corked) {
      this.#corked = true;
      pipe.cork();
      setImmediate(() => {
        this.#corked = false;
        pipe.uncork();
      });
    }
    pipe.write(`${JSON.stringify(message)}\n`);
  }

  #cancel(pending: Pending): void {
    this.#fail(
      pending,
      new RunFailure("interrupted", "The run was interrupted before it finished", { runId: pending.call.runId }),
      false,
    );
    this.#send({ op: "cancel", id: pending.call.runId });
    // The worker acknowledges with `cancelled` (or a last result); a call stuck in code that cannot be
    // interrupted costs the worker.
    pending.cancelTimer = setTimeout(() => {
      const log = { app: this.#options.label, run_id: pending.call.runId, pid: this.pid };
      if (this.#pending.size > 1) {
        // Killing the worker would fail its other calls: let this one run out (its grace period still
        // applies) and discard its result.
        this.#options.logger.warn(
          log,
          "cancelled call did not stop; it runs until it ends and its result is discarded",
        );
        return;
      }
      this.#options.logger.warn(log, "cancelled call did not stop; killing its worker");
      this.#kill();
    }, CANCEL_GRACE_MS);
  }

  /** Reports a failure to the caller; `settle` also frees the slot (not before the worker stopped the call). */
  #fail(pending: Pending, failure: RunFailure, settle = true): void {
    if (!pending.failed) {
      pending.failed = failure;
      if (pending.stream) pending.stream.fail(failure);
      else pending.reject(failure);
    }
    if (settle) pending.settle();
  }

  #readMessages(pipe: Readable): void {
    let buffer = "";
    pipe.setEncoding("utf8").on("data", (chunk: string) => {
      buffer += chunk;
      let newline: number;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (line.trim()) this.#onMessage(JSON.parse(line) as Message);
      }
    });
  }

  #onMessage(message: Message): void {
    if (message.op === "ready") return this.#onReady();
    if (message.op === "load_error") {
      this.#loadError = new ProblemError(
        "app-unavailable",
        `${this.#options.label}: main.py failed to load: ${message.type}: ${message.message}`,
      );
      this.#options.logger.error({ app: this.#options.label, traceback: message.traceback }, "main.py failed to load");
      return;
    }
    const pending = message.id === undefined ? undefined : this.#pending.get(message.id);
    if (!pending) return;
    const { runId } = pending.call;
    switch (message.op) {
      case "log": {
        // One log line per line of output, whatever the chunks the function wrote.
        const stream = message.stream as string;
        const lines = ((pending.partial[stream] ?? "") + (message.text as string)).split("\n");
        pending.partial[stream] = lines.pop()!;
        for (const line of lines) this.#logOutput(runId, stream, line);
        return;
      }
      case "result":
        if (!pending.failed) {
          pending.resolve({ kind: "result", result: message.value, runTimeMs: performance.now() - pending.startedAt });
        }
        return pending.settle();
      case "stream": {
        if (pending.failed) return;
        pending.stream = new ItemQueue<StreamItem>({ onReturn: () => this.#cancel(pending) });
        pending.resolve({ kind: "stream", items: pending.stream, startedAt: pending.startedAt });
        return;
      }
      case "item": {
        pending.stream?.push({ value: message.value });
        return;
      }
      case "end":
        pending.stream?.end();
        return pending.settle();
      case "cancelled":
        return this.#fail(
          pending,
          new RunFailure("interrupted", "The run was interrupted before it finished", { runId }),
        );
      case "fail": {
        const kind = message.kind as string;
        if (kind === "not_found") {
          this.#failWith(pending, new ProblemError("not-found", message.message as string, { runId }));
          return;
        }
        const exception = kind === "exception";
        const failure = new RunFailure(
          exception ? (message.type as string) : kind,
          exception ? `${message.type}: ${message.message}` : (message.message as string),
          {
            runId,
            exception,
            traceback: message.traceback as string | undefined,
          },
        );
        return this.#fail(pending, failure);
      }
    }
  }

  #logOutput(runId: string, stream: string, text: string): void {
    this.#options.logger.info({ run_id: runId, app: this.#options.label, stream, text }, "function output");
  }

  #failWith(pending: Pending, error: ProblemError): void {
    if (!pending.failed) pending.reject(error);
    pending.settle();
  }

  #onExit(): void {
    for (const pending of [...this.#pending.values()]) {
      const failure = new RunFailure(
        "worker_crashed",
        `The worker process died during the call (${this.#exitCode}); it is replaced, retry the call`,
        {
          runId: pending.call.runId,
        },
      );
      this.#fail(pending, failure);
    }
  }
}
