/**
 * A worker's side of the wire of `_call_wire.ts`: hands calls to the supervisor over one kept connection
 * and reads each call's outcome as a local executor would give it. Giving a call up (a cancel, a
 * deadline, its caller gone) tells the supervisor, which stops the function on its replica. A connection
 * that breaks once the supervisor accepted it (the supervisor killed) interrupts its calls, as a server
 * that stops during a call does; one that breaks before ran none, and its calls may be sent again.
 */
import { createConnection, type Socket } from "node:net";
import { type Frame, FrameSplitter, interrupted, type OpenCall, readOutcome } from "../cluster/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import type { ExecutedCall, ExecuteRequest } from "../runs/mod.ts";
import { RunFailure } from "../runtime/mod.ts";
import { type CallHeader, HELLO_ACCEPTED, isTerminalFrame, splitId, writeInTurn } from "./_call_wire.ts";

/** Bytes of one call's frames held unread before the supervisor is asked to hold the call. */
const HIGH_WATER_BYTES = 1024 * 1024;

const PEER = "This host's supervisor";

/**
 * The `Retry-After` of a call the supervisor never took, in seconds. A worker that cannot reach its
 * supervisor is one whose supervisor died (it stops too) or has not listened yet: a retry a moment later
 * reaches a host that serves.
 */
const UNREACHABLE_RETRY_AFTER_S = "1";

/** One call's frames as they arrive, handed out one at a time. */
class CallFrames {
  readonly #frames: Frame[] = [];
  #heldBytes = 0;
  #waiting: { resolve(frame: Frame): void; reject(error: unknown): void } | null = null;
  #failure: unknown = null;
  /** Whether the supervisor was asked to hold the call. */
  holding = false;

  /** Takes a frame; true when the reader is behind and the call should be held. */
  push(frame: Frame, bytes: number): boolean {
    const waiting = this.#waiting;
    if (waiting) {
      this.#waiting = null;
      waiting.resolve(frame);
      return false;
    }
    this.#frames.push(frame);
    this.#heldBytes += bytes;
    return this.#heldBytes > HIGH_WATER_BYTES && !this.holding;
  }

  fail(error: unknown): void {
    this.#failure ??= error;
    const waiting = this.#waiting;
    this.#waiting = null;
    waiting?.reject(this.#failure);
  }

  /** The next frame; rejects once the call's connection broke. `caughtUp` runs when the reader caught up. */
  next(caughtUp: () => void): Promise<Frame> {
    const frame = this.#frames.shift();
    if (frame !== undefined) {
      if (this.#frames.length === 0) {
        this.#heldBytes = 0;
        if (this.holding) caughtUp();
      }
      return Promise.resolve(frame);
    }
    if (this.#failure !== null) return Promise.reject(this.#failure);
    return new Promise((resolve, reject) => (this.#waiting = { resolve, reject }));
  }
}

/** The connection to the supervisor: calls written as they come, frames read and handed to their call. */
class SupervisorConnection {
  readonly socket: Socket;
  readonly calls = new Map<number, CallFrames>();
  readonly #lines = new FrameSplitter();
  #broken: unknown = null;
  /** Whether the supervisor accepted the hello: from then on, the calls written here are its to run. */
  accepted = false;

  constructor(path: string, hello: string) {
    this.socket = createConnection(path);
    this.socket.write(`${hello}\n`);
    this.socket.on("data", (chunk: Buffer) => this.#onData(chunk));
    this.socket.on("error", (error) => this.#break(error));
    this.socket.on("close", () => this.#break(new Error("the connection closed")));
  }

  get usable(): boolean {
    return this.#broken === null && !this.socket.destroyed;
  }

  #onData(chunk: Buffer): void {
    try {
      for (const line of this.#lines.push(chunk)) {
        if (!line.length) continue;
        if (!this.accepted) {
          if (line.toString("utf8") !== HELLO_ACCEPTED) throw new Error("a first line other than the hello's answer");
          this.accepted = true;
          continue;
        }
        const parsed = splitId(line.toString("utf8"));
        if (!parsed) throw new Error("a line without a call's id");
        const call = this.calls.get(parsed.id);
        // A frame of a call given up: dropped.
        if (call && call.push(JSON.parse(parsed.rest) as Frame, line.length)) {
          call.holding = true;
          writeInTurn(this.socket, `${parsed.id} p\n`);
        }
      }
    } catch (error) {
      this.#break(error);
      this.socket.destroy();
    }
  }

  #break(error: unknown): void {
    this.#broken ??= error;
    for (const call of this.calls.values()) call.fail(this.#broken);
    this.calls.clear();
  }
}

/** The failure of a call whose supervisor went away (killed) after it took the call: the run is interrupted. */
function supervisorLost(runId: string, error: unknown): RunFailure {
  return new RunFailure(
    "interrupted",
    `${PEER} stopped during the call (${
      error instanceof Error ? error.message : String(error)
    }); the run is interrupted`,
    { runId },
  );
}

/** A slot the supervisor holds for a call this worker makes directly on a replica's channel. */
export interface HeldSlot {
  /** The replica's channel id. */
  replica: number;
  deploymentId?: string;
  graceMs: number;
  /** Whether it may be kept a moment for the next call (`idle_slots.ts`); else given back after its call. */
  keep: boolean;
  /** Gives the slot back (once the call is over in the replica); extra calls do nothing. */
  release(): void;
}

/**
 * Hands calls to the supervisor listening at `path`, saying `token` (hex) and `workerId` (its
 * node:cluster id, which slots are given to) first on its connection.
 */
export class SupervisorCalls {
  readonly #path: string;
  readonly #hello: string;
  #connection: SupervisorConnection | null = null;
  #nextId = 0;

  constructor(path: string, options: { token: string; workerId?: number }) {
    this.#path = path;
    this.#hello = options.workerId === undefined ? options.token : `${options.token} ${options.workerId}`;
  }

  /** The connection, opened again when the last one broke. */
  #open(): SupervisorConnection {
    if (!this.#connection?.usable) this.#connection = new SupervisorConnection(this.#path, this.#hello);
    return this.#connection;
  }

  /**
   * Asks for a slot on a replica of the app that this worker holds a channel of, free now; null when
   * there is none (or the supervisor cannot be reached): hand the call over with `execute` then.
   */
  async slot(projectId: string, app: string): Promise<HeldSlot | null> {
    const connection = this.#open();
    const id = this.#nextId++;
    const frames = new CallFrames();
    connection.calls.set(id, frames);
    writeInTurn(connection.socket, `${id} s ${JSON.stringify({ p: projectId, a: app })}\n`);
    // The answer's key is `seat`, as the wire has it (`_call_wire.ts`): a slot.
    let answer: { seat?: { replica: number; deploymentId?: string; graceMs: number; keep?: boolean } };
    try {
      answer = await frames.next(() => {}) as typeof answer;
    } catch {
      return null;
    } finally {
      connection.calls.delete(id);
    }
    const slot = answer.seat;
    if (!slot || !Number.isSafeInteger(slot.replica) || typeof slot.graceMs !== "number") return null;
    let released = false;
    return {
      replica: slot.replica,
      deploymentId: typeof slot.deploymentId === "string" ? slot.deploymentId : undefined,
      graceMs: slot.graceMs,
      keep: slot.keep === true,
      release() {
        if (released) return;
        released = true;
        // A connection that broke released every slot on it already.
        if (connection.usable) writeInTurn(connection.socket, `${id} f\n`);
      },
    };
  }

  /**
   * Runs `request` on the supervisor's replicas and resolves as a local executor does. Rejects with the
   * function's failure or the supervisor's problem as it answered them, with `interrupted` once
   * `request.signal` aborted or when the supervisor went away after it took the call (its function may
   * have run: not a call to send again), and with a 503 with `Retry-After` when it could not be reached
   * before (nothing ran).
   */
  async execute(request: ExecuteRequest, options: { deadlineMs?: number; here?: boolean } = {}): Promise<ExecutedCall> {
    const { runId, signal } = request;
    if (signal.aborted) throw interrupted(runId);
    const connection = this.#open();
    const id = this.#nextId++;
    const frames = new CallFrames();
    connection.calls.set(id, frames);
    const { http } = request;
    const body = http ? Buffer.from(http.body.buffer, http.body.byteOffset, http.body.byteLength) : request.inputJson
      ?? JSON.stringify(request.input);
    const header: CallHeader = {
      p: request.projectId,
      a: request.app,
      f: request.functionName,
      r: runId,
      n: Buffer.byteLength(body),
    };
    if (options.deadlineMs !== undefined) header.d = Math.max(0, Math.floor(options.deadlineMs));
    if (options.here) header.h = 1;
    if (http) {
      header.m = http.method;
      header.q = http.query;
      header.hd = http.headers;
    }
    if (typeof body === "string") writeInTurn(connection.socket, `${id} ${JSON.stringify(header)}\n${body}`);
    else {
      writeInTurn(connection.socket, `${id} ${JSON.stringify(header)}\n`);
      writeInTurn(connection.socket, body);
    }
    const giveUp = () => {
      if (!connection.calls.delete(id)) return;
      frames.fail(interrupted(runId));
      if (connection.usable) writeInTurn(connection.socket, `${id} x\n`);
    };
    signal.addEventListener("abort", giveUp, { once: true });
    const call: OpenCall = {
      runId,
      peer: PEER,
      signal,
      abort: giveUp,
      release: () => signal.removeEventListener("abort", giveUp),
      cutOff: (error) => supervisorLost(runId, error),
    };
    const stream = this.#frames({ connection, id, frames, giveUp });
    try {
      return await readOutcome(stream, call, request);
    } catch (error) {
      call.release();
      void stream.return(undefined);
      if (signal.aborted) throw interrupted(runId);
      if (error instanceof ProblemError) throw error;
      if (connection.accepted) throw supervisorLost(runId, error);
      throw new ProblemError("service-unavailable", `${PEER} could not be reached (${String(error)}); try again`, {
        cause: error,
        headers: { "Retry-After": UNREACHABLE_RETRY_AFTER_S },
      });
    }
  }

  /** The frames of call `id`, up to its terminal one; read no further, the call is given up. */
  async *#frames(open: {
    connection: SupervisorConnection;
    id: number;
    frames: CallFrames;
    giveUp(): void;
  }): AsyncGenerator<Frame> {
    const { connection, id, frames, giveUp } = open;
    let over = false;
    const caughtUp = () => {
      frames.holding = false;
      if (connection.usable) writeInTurn(connection.socket, `${id} r\n`);
    };
    try {
      for (;;) {
        const frame = await frames.next(caughtUp);
        over = isTerminalFrame(frame as Record<string, unknown>);
        yield frame;
        if (over) return;
      }
    } finally {
      if (over) connection.calls.delete(id);
      else giveUp();
    }
  }

  /** Closes the connection; a later call opens a new one. */
  close(): void {
    this.#connection?.socket.destroy();
    this.#connection = null;
  }
}
