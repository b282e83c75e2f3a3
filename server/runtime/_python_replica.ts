/**
 * One Python worker process running `_worker.py` over an app's `main.py`. Requests go down fd 3 and
 * messages come back on fd 4 (newline-delimited JSON); the function's stdout/stderr arrive as per-run
 * log messages, the process's own stdout/stderr are logged as worker output.
 */
import { setImmediate as setImmediatePromise } from "node:timers/promises";
import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import type { Logger } from "../log.ts";
import type { JailSpec, ReplicaCgroup, Sandbox } from "../sandbox/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import { AppStartError, outOfMemory, RunFailure } from "./_failures.ts";
import { ItemQueue } from "./_item_queue.ts";
import { harnessPrepared } from "./_harness_bytecode.ts";
import { startColdWorker, type WorkerProcess } from "./_worker_process.ts";
import type { CallableReplica, ReplicaCall } from "./_replica.ts";
import type { CallOutcome, StreamItem } from "./_outcome.ts";
import { LineSplitter, LineTooLong, type Payload } from "../lines/mod.ts";
import { InvalidJson, JsonValidator } from "./_json_validator.ts";
import { RawJson } from "../json/mod.ts";
import {
  type CallMessage,
  encodeCall,
  encodeControl,
  isFinal,
  MAX_MESSAGE_BYTES,
  parseRawItem,
  parseWorkerMessage,
  payloadBytes,
  RAW_ITEM_BYTES,
  ProtocolViolation,
  type ServerMessage,
  STREAM_WINDOW_BYTES,
  STREAM_WINDOW_ITEMS,
  type WorkerMessage,
} from "./_worker_protocol.ts";

const START_TIMEOUT_MS = 60_000;
/** How long a cancelled call may take to stop before its worker is killed. */
const CANCEL_GRACE_MS = 1_000;
const STOP_GRACE_MS = 2_000;
/** How long a worker that closed its message pipe may take to exit before that counts as a violation. */
const PIPE_CLOSE_GRACE_MS = 250;
/** Messages from this size on are decoded and parsed in turns of their own. */
const BIG_MESSAGE_BYTES = 1024 * 1024;
/** How many bytes of a result's payload are validated per turn of the event loop (a few milliseconds). */
const PAYLOAD_SLICE_BYTES = 256 * 1024;
/** How many ended calls are remembered, so that late output of one is still logged rather than refused. */
const ENDED_CALLS_KEPT = 1024;

/** How a replica without `start` cold-starts its process. */
export interface ColdStartSpec {
  appDir: string;
  python: string;
  concurrency: number;
  sandbox: Sandbox;
  /** The replica's jail (the worker harness adds itself to what it may read). */
  jail: JailSpec;
  /** Modules imported before main.py (`[runtime] preload`). */
  preload?: string[];
}

/** Options of `PythonReplica`: with `start`, or with what a cold start needs. */
export type PythonReplicaOptions =
  & ReplicaOptions
  & (ColdStartSpec | { start(): Promise<WorkerProcess> });

/** What every `PythonReplica` is given. */
export interface ReplicaOptions {
  label: string;
  logger: Logger;
  /** Told every line a call's function writes (stdout, stderr, `logging`), as it is written. */
  onOutput?(line: OutputLine): void;
  /** Told each batch of a batched function that left for the function (its size, how long it waited). */
  onBatch?(batch: BatchReport): void;
  /** The replica's cgroup: its limits, and whether the kernel killed it at its memory limit. */
  cgroup?: ReplicaCgroup;
  /**
   * Gives the worker's process (a fork of the app's template); without it the worker cold-starts in a
   * jail of its own. A rejection is the replica's failure to start.
   */
  start?(): Promise<WorkerProcess>;
  /**
   * Makes the app's files ready on this host before the worker starts (a deployment this host had not
   * built); the start timeout counts from when it resolves. A rejection is the replica's failure to start.
   */
  prepare?(): Promise<void>;
  /** Told once its process started with extra channels (`WorkerProcess.channels`), before it is ready. */
  onChannels?(replica: PythonReplica, channels: readonly Socket[]): void;
  /**
   * Ready as soon as `start` gave its process: a channel of a replica another process owns and found
   * ready (a host's worker calling its supervisor's replica directly), where no `ready` message comes.
   */
  readyOnStart?: boolean;
}

/** How a replica's process ended, as its calls in flight were told. */
export interface ReplicaExit {
  reason: string;
  outOfMemory: boolean;
  /** Its memory limit, when it was killed at it. */
  memoryBytes?: number;
  /** Stopped by the server (its calls were interrupted), not crashed. */
  stopped: boolean;
}

/** A batch of a batched function, as its worker reported it when the batch left. */
export interface BatchReport {
  /** The function's name. */
  fn: string;
  /** Calls in the batch. */
  size: number;
  /** Milliseconds from its first call's arrival in the worker to its start. */
  waitMs: number;
}

/** One line of a call's output. */
export interface OutputLine {
  runId: string;
  stream: "stdout" | "stderr";
  text: string;
  /** Unix ms. */
  at: number;
}

interface Pending {
  call: ReplicaCall;
  startedAt: number;
  settle(): void;
  resolve(outcome: CallOutcome): void;
  reject(error: unknown): void;
  stream?: ItemQueue<StreamItem>;
  failed?: RunFailure;
  /** Set once the call was cancelled: a second cancel (the signal and the stream's reader both stop) is a no-op. */
  cancelTimer?: ReturnType<typeof setTimeout>;
  /** Output not yet logged because its line is not complete. */
  partial: Record<string, string>;
  /** Items and bytes the stream's reader consumed that were not yet credited back to the worker. */
  consumed?: { items: number; bytes: number };
}

/** A warm Python worker; calls run concurrently up to the app's `replica_concurrency`. */
export class PythonReplica implements CallableReplica {
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;
  wasReady = false;
  usable = true;
  #worker: WorkerProcess | undefined;
  /** Set when it was to be killed before its process was known. */
  #killed = false;
  #unstarted = false;
  readonly #options: PythonReplicaOptions;
  readonly #pending = new Map<string, Pending>();
  #loadError: ProblemError | undefined;
  #corked = false;
  #exitCode: string | undefined;
  /** Set when the worker ended because the kernel killed it at its cgroup's memory limit. */
  #outOfMemory = false;
  /** The limit it was killed at, when its exit said (else its cgroup's). */
  #memoryBytes: number | undefined;
  /** Set by `stop()`: calls still running when the worker exits were cut by the server, not by a crash. */
  #stopping = false;
  #violation: string | undefined;
  /** Ids of calls that ended, oldest first (bounded). */
  readonly #ended = new Set<string>();

  constructor(options: PythonReplicaOptions) {
    this.#options = options;
    const prepared = this.#prepare();
    const started = prepared.then(() => {
      if (this.#killed) throw new Error("stopped before it started");
      if (options.start) return options.start();
      const cold = options as ReplicaOptions & ColdStartSpec;
      return startColdWorker({ ...cold, preload: cold.preload ?? [] });
    });
    this.exited = started.then((worker) => {
      this.#worker = worker;
      if (this.#killed) worker.kill();
      this.#readMessages(worker.messages);
      if (worker.channels.length) options.onChannels?.(this, worker.channels);
      if (options.readyOnStart) this.#onReady();
      return worker.exited;
    }, (error: Error) => ({ reason: error.message, outOfMemory: false, unstarted: true })).then((exit) => {
      this.#exitCode = exit.reason;
      this.#outOfMemory = exit.outOfMemory;
      if ("memoryBytes" in exit) this.#memoryBytes = exit.memoryBytes;
      if ("stopped" in exit && exit.stopped) this.#stopping = true;
      this.usable = false;
      this.#onExit();
      return "unstarted" in exit || !/^(exit code|signal|killed)/.test(exit.reason);
    }).then((unstarted) => void (this.#unstarted = unstarted));
    this.ready = new Promise((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      void prepared.then(() => {
        timer = setTimeout(() => {
          reject(
            new ProblemError(
              "app-unavailable",
              `${options.label}: the Python worker did not start within ${START_TIMEOUT_MS / 1000} s`,
            ),
          );
          this.#kill();
        }, START_TIMEOUT_MS);
      }, () => undefined);
      void this.exited.then(() => {
        clearTimeout(timer);
        const how = this.#unstarted
          ? `cannot start ${
            "python" in options ? options.python : "its process"
          } (${this.#exitCode}); check deployment.python`
          : `the Python worker exited while starting (${this.#exitCode})`;
        reject(this.#loadError ?? new ProblemError("app-unavailable", `${options.label}: ${how}`));
      });
      this.#onReady = () => {
        clearTimeout(timer);
        this.wasReady = true;
        resolve();
      };
    });
  }

  #onReady: () => void = () => undefined;

  /**
   * Runs the `prepare` option (its failure becomes the replica's load error), and waits for the harness's
   * bytecode while the server is still making it (`_harness_bytecode.ts`).
   */
  #prepare(): Promise<void> {
    const prepare = this.#options.prepare;
    if (!prepare) return harnessPrepared();
    return Promise.all([prepare(), harnessPrepared()]).then(() => undefined, (error: Error) => {
      this.#loadError = new ProblemError("app-unavailable", `${this.#options.label}: ${error.message}`);
      throw error;
    });
  }

  get pid(): number | undefined {
    return this.#worker?.pid;
  }

  /** Calls in flight on it that this process made. */
  get inFlight(): number {
    return this.#pending.size;
  }

  /** The app version it serves, as logs name it. */
  get label(): string {
    return this.#options.label;
  }

  /** How its process began (`cold` or `fork`); undefined until it is known. */
  get origin(): WorkerProcess["origin"] | undefined {
    return this.#worker?.origin;
  }

  /** Runs a call; resolves with its result or its stream once the worker says which it is. */
  call(call: ReplicaCall): Promise<CallOutcome> {
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
          this.#ended.add(call.runId);
          if (this.#ended.size > ENDED_CALLS_KEPT) this.#ended.delete(this.#ended.values().next().value!);
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
      if (call.signal?.aborted) {
        // Interrupted before the worker was given the call: there is nothing to stop in it.
        const failure = new RunFailure("interrupted", "The run was interrupted before it started", {
          runId: call.runId,
        });
        return this.#fail(pending, failure);
      }
      call.signal?.addEventListener("abort", onAbort, { once: true });
      let line: string;
      try {
        line = encodeCall(
          { op: "call", id: call.runId, run_id: call.runId, fn: call.functionName, kwargs: call.kwargs },
          { kwargsJson: call.kwargsJson },
        );
      } catch (error) {
        // Arguments JSON cannot encode (e.g. nested past the engine's stack) fail this call alone.
        const message = `The arguments cannot be sent to the worker: ${(error as Error).message}`;
        return this.#failWith(pending, new ProblemError("bad-request", message, { runId: call.runId }));
      }
      this.#send(line);
    });
  }

  /**
   * Closes the request pipe (the harness exits), then kills the worker's process group after a grace
   * period; processes the function started and left behind in the group go with it.
   */
  async stop(): Promise<void> {
    this.#stopping = true;
    if (this.#worker) await this.#worker.stop(STOP_GRACE_MS);
    else this.#kill();
    await this.exited;
  }

  /** Kills its process now (a call past its time, a channel's peer that broke the protocol). */
  kill(): void {
    this.#kill();
  }

  /** How its process ended; undefined while it runs. */
  get exit(): ReplicaExit | undefined {
    if (this.#exitCode === undefined) return undefined;
    const memoryBytes = this.#outOfMemory ? this.#memoryBytes ?? this.#options.cgroup?.limits.memoryBytes : undefined;
    return { reason: this.#exitCode, outOfMemory: this.#outOfMemory, memoryBytes, stopped: this.#stopping };
  }

  #kill(): void {
    this.usable = false;
    this.#killed = true;
    this.#worker?.kill();
  }

  #send(line: string): void {
    const pipe = this.#worker?.requests;
    if (!pipe?.writable) return;
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
    pipe.write(line);
  }

  #cancel(pending: Pending): void {
    // A stream is cancelled twice when its client goes away (the request's signal, then its reader's
    // return): the second must not arm another timer, which would outlive the call and kill the worker
    // under its other calls.
    if (pending.cancelTimer !== undefined || this.#pending.get(pending.call.runId) !== pending) return;
    this.#fail(
      pending,
      new RunFailure("interrupted", "The run was interrupted before it finished", { runId: pending.call.runId }),
      false,
    );
    this.#sendControl({ op: "cancel", id: pending.call.runId });
    // The worker acknowledges with `cancelled` (or a last result); a call stuck in code that cannot be
    // interrupted costs the worker.
    pending.cancelTimer = setTimeout(() => {
      if (this.#pending.get(pending.call.runId) !== pending) return;
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
      const killIfAlone = this.#worker?.killIfAlone;
      // A channel of a replica other processes call too: its owner knows whether this call is alone.
      if (killIfAlone) return killIfAlone();
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

  #sendControl(message: Exclude<ServerMessage, { op: "call" }>): void {
    this.#send(encodeControl(message));
  }

  #readMessages(pipe: Readable): void {
    const lines = new LineSplitter(MAX_MESSAGE_BYTES, { payloadBytes });
    const backlog: Array<Buffer | Payload> = [];
    let draining = false;
    const drain = async () => {
      draining = true;
      try {
        while (backlog.length && this.#violation === undefined) {
          const line = backlog.shift()!;
          if (!Buffer.isBuffer(line)) {
            pipe.pause();
            await this.#onPayload(line);
            continue;
          }
          if (line.length === 0) continue;
          if (line.length < BIG_MESSAGE_BYTES) {
            // A big item's value goes on as the bytes it came in: never decoded, parsed or encoded again.
            const item = line.length >= RAW_ITEM_BYTES ? parseRawItem(line) : undefined;
            if (item) this.#onMessage({ op: "item", id: item.id, value: item.value }, line.length + 1);
            else this.#onMessage(parseWorkerMessage(line.toString("utf8")), line.length + 1);
            continue;
          }
          // A big message (a 50 MB result) is decoded and parsed in separate turns of the event loop,
          // with the pipe paused to keep the order, so other requests are served in between.
          pipe.pause();
          await setImmediatePromise();
          const text = line.toString("utf8");
          await setImmediatePromise();
          if (this.#violation === undefined) this.#onMessage(parseWorkerMessage(text), line.length + 1);
        }
      } catch (error) {
        this.#violate(
          error instanceof ProtocolViolation
            ? error.message.replace(/^the worker /, "it ")
            : error instanceof InvalidJson
            ? `it sent a result payload that is not JSON text: ${error.message}`
            : `the server could not handle one of its messages: ${(error as Error).message}`,
        );
      } finally {
        draining = false;
        if (this.#violation === undefined) pipe.resume();
      }
    };
    pipe.on("data", (chunk: Buffer) => {
      if (this.#violation !== undefined) return;
      try {
        backlog.push(...lines.push(chunk));
      } catch (error) {
        if (!(error instanceof LineTooLong)) throw error;
        return this.#violate(`it sent more than ${MAX_MESSAGE_BYTES / 1024 / 1024} MiB without a newline`);
      }
      if (!draining && backlog.length) void drain();
    });
    pipe.on("end", () => {
      // A worker that exits closes the pipe too; one that closes it and lives on can no longer answer.
      setTimeout(() => {
        if (!this.#worker?.hasExited()) this.#violate("it closed its message pipe (fd 4) and kept running");
      }, PIPE_CLOSE_GRACE_MS).unref();
    });
  }

  /**
   * A result sent as a header and a raw payload: the payload is checked to be JSON text a slice per turn
   * of the event loop and handed on as `RawJson`, never parsed (one `JSON.parse` of 50 MB blocks every
   * other request for its whole length). Throws `InvalidJson` for a payload that is not one value.
   */
  async #onPayload(payload: Payload): Promise<void> {
    const header = parseWorkerMessage(payload.line.toString("utf8"));
    if (header.op !== "result" || !("bytes" in header)) throw new ProtocolViolation("the worker sent a stray payload");
    const validator = new JsonValidator();
    let sliced = 0;
    for (const chunk of payload.chunks) {
      validator.push(chunk);
      sliced += chunk.length;
      if (sliced >= PAYLOAD_SLICE_BYTES) {
        sliced = 0;
        await setImmediatePromise();
        if (this.#violation !== undefined) return;
      }
    }
    validator.end();
    const value = new RawJson(payload.chunks, payload.bytes);
    this.#onMessage({ op: "result", id: header.id, value }, payload.line.length + 1 + payload.bytes);
  }

  /**
   * Ends a worker that broke the protocol: its calls fail with a 502 naming the violation, it is killed
   * and its pool replaces it. Nothing a worker sends can harm the server or another worker's calls.
   */
  #violate(reason: string): void {
    if (this.#violation !== undefined || !this.usable) return;
    this.#violation = reason;
    this.usable = false;
    this.#options.logger.error(
      { app: this.#options.label, pid: this.pid, reason },
      "worker broke the protocol; replacing it",
    );
    for (const pending of [...this.#pending.values()]) {
      this.#fail(
        pending,
        new RunFailure(
          "protocol_violation",
          `The app's worker broke the worker protocol (${reason}); it was replaced, retry the call`,
          { runId: pending.call.runId },
        ),
      );
    }
    this.#kill();
  }

  /** Handles one message; `size` is its line's length in bytes, newline included. */
  #onMessage(message: WorkerMessage, size: number): void {
    // Messages already in the pipe when the worker was killed are moot.
    if (!this.usable) return;
    if (message.op === "ready") return this.#onReady();
    if (message.op === "batch") {
      return this.#options.onBatch?.({ fn: message.fn, size: message.size, waitMs: message.wait_ms });
    }
    if (message.op === "load_error") {
      this.#loadError = new AppStartError(
        `${this.#options.label}: main.py failed to load: ${message.type}: ${message.message}`,
        message.traceback.split("\n").filter((line) => line.trim()),
      );
      this.#options.logger.error({ app: this.#options.label, traceback: message.traceback }, "main.py failed to load");
      return;
    }
    const pending = this.#pending.get(message.id);
    if (!pending) return this.#onStrayMessage(message);
    const { runId } = pending.call;
    switch (message.op) {
      case "log": {
        // One log line per line of output, whatever the chunks the function wrote.
        const stream = message.stream;
        const lines = ((pending.partial[stream] ?? "") + message.text).split("\n");
        pending.partial[stream] = lines.pop()!;
        for (const line of lines) this.#logOutput(runId, stream, line);
        return;
      }
      case "result":
        if ("bytes" in message) throw new ProtocolViolation("the worker sent a result header without its payload");
        if (!pending.failed) {
          pending.resolve({ kind: "result", result: message.value, runTimeMs: performance.now() - pending.startedAt });
        }
        return pending.settle();
      case "stream": {
        if (pending.failed) return;
        pending.stream = new ItemQueue<StreamItem>({
          onReturn: () => this.#cancel(pending),
          onTake: (bytes) => this.#credit(pending, bytes),
        });
        pending.resolve({ kind: "stream", items: pending.stream, startedAt: pending.startedAt });
        return;
      }
      case "item": {
        pending.stream?.push({ value: message.value }, size);
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
        const kind = message.kind;
        if (kind === "not_found") {
          this.#failWith(pending, new ProblemError("not-found", message.message, { runId }));
          return;
        }
        const exception = kind === "exception";
        // A call message the worker could not read is the caller's arguments' fault.
        const errorType = exception ? message.type : kind === "bad_request" ? "invalid_arguments" : kind;
        const failure = new RunFailure(
          errorType,
          message.message,
          { runId, exception, traceback: message.traceback ?? undefined },
        );
        return this.#fail(pending, failure);
      }
    }
  }

  /** A message for a call not in flight: late output of an ended call is logged, anything else is a violation. */
  #onStrayMessage(message: CallMessage): void {
    const ended = this.#ended.has(message.id);
    if (ended && message.op === "log") {
      if (message.text.trim()) this.#logOutput(message.id, message.stream, message.text.replace(/\n$/, ""));
      return;
    }
    const what = ended
      ? isFinal(message) ? "a second final message" : `a ${message.op} message after its end`
      : `a ${message.op} message`;
    this.#violate(
      `it sent ${what} for call ${JSON.stringify(message.id.slice(0, 64))}, which it ${
        ended ? "had already answered" : "was never given"
      }`,
    );
  }

  /**
   * Returns credit for an item the stream's reader took, in batches of half a window: the worker stops
   * asking its generator for items while a full window is unread, so memory is bounded by the reader.
   */
  #credit(pending: Pending, bytes: number): void {
    const consumed = (pending.consumed ??= { items: 0, bytes: 0 });
    consumed.items++;
    consumed.bytes += bytes;
    if (consumed.items >= STREAM_WINDOW_ITEMS / 2 || consumed.bytes >= STREAM_WINDOW_BYTES / 2) {
      this.#sendControl({ op: "credit", id: pending.call.runId, items: consumed.items, bytes: consumed.bytes });
      consumed.items = 0;
      consumed.bytes = 0;
    }
  }

  #logOutput(runId: string, stream: string, text: string): void {
    this.#options.logger.info({ run_id: runId, app: this.#options.label, stream, text }, "function output");
    this.#options.onOutput?.({ runId, stream: stream as OutputLine["stream"], text, at: Date.now() });
  }

  #failWith(pending: Pending, error: ProblemError): void {
    if (!pending.failed) pending.reject(error);
    pending.settle();
  }

  #onExit(): void {
    for (const pending of [...this.#pending.values()]) {
      const runId = pending.call.runId;
      // Killed at its memory limit: said as such, whatever else was under way (a stop, a cancel).
      if (this.#outOfMemory) {
        this.#fail(pending, outOfMemory(runId, this.#memoryBytes ?? this.#options.cgroup?.limits.memoryBytes ?? 0));
        continue;
      }
      // Stopped by the server (a drain past its timeout, a server that closes): the same word as the record.
      const failure = this.#stopping
        ? new RunFailure("interrupted", "The server stopped before the call finished; the run is interrupted", {
          runId,
        })
        : new RunFailure(
          "worker_crashed",
          `The worker process died during the call (${this.#exitCode}); it is replaced, retry the call`,
          { runId },
        );
      this.#fail(pending, failure);
    }
  }
}
