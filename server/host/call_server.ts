/**
 * The supervisor's side of the wire of `_call_wire.ts`: listens on a Unix socket only its user may open,
 * takes the calls its workers hand it, runs each on its own replicas (`serveForwardedCall`, as a call
 * forwarded by another host) and writes the frames back as they come. A call whose reader fell behind is
 * held (its worker says so), so a stalled stream's reader holds its function, not this process's memory.
 */
import { timingSafeEqual } from "node:crypto";
import { rm } from "node:fs/promises";
import { createServer, type Server, type Socket } from "node:net";
import { LightAbortController } from "../abort/mod.ts";
import { serveForwardedCall } from "../cluster/mod.ts";
import { LineSplitter, LineTooLong, type Payload } from "../lines/mod.ts";
import type { Logger } from "../log.ts";
import type { RunExecutor } from "../runs/mod.ts";
import { type CallHeader, HELLO_ACCEPTED, isCallHeader, MAX_HEADER_BYTES, splitId, writeInTurn } from "./_call_wire.ts";

/** Options of `listenForWorkerCalls`. */
export interface WorkerCallsOptions {
  /** What a worker must say first (the bytes whose hex it sends). */
  token: Uint8Array;
  /** Where the workers' calls run: this host's replicas or, on a host of a cluster, the cluster's. */
  executor: RunExecutor;
  /** Where a call another host forwarded runs (`h: 1`): this host's replicas only; default `executor`. */
  hereExecutor?: RunExecutor;
  /** The largest body a call may carry (the workers refuse larger ones first). */
  bodyLimitBytes: number;
  logger: Logger;
  /**
   * Counts each worker's connection, from its hello to its close, as a request in flight: a draining
   * supervisor waits for its workers' connections to close (they close when the worker exits, its own
   * calls answered) before it stops its replicas.
   */
  gate?: { enter(): void; leave(): void };
  /** Slots on replicas the worker calls directly over a channel it holds (`replica_channels.ts`). */
  slots?: ChannelSlots;
}

/** A slot held for a worker's direct call: the replica's channel id, what the call needs, its release. */
export interface WireSlot {
  replica: number;
  deploymentId?: string;
  graceMs: number;
  /** Whether the worker may keep it a moment for its next call (`idle_slots.ts`). */
  keep: boolean;
  release(): void;
}

/** Finds slots for workers' direct calls. */
export interface ChannelSlots {
  /** A free slot now on a ready replica of the app whose channel worker `workerId` holds; null otherwise. */
  slot(workerId: number, projectId: string, app: string): WireSlot | null;
}

/** The listening socket. */
export interface WorkerCallsServer {
  /** Stops listening, closes idle connections and each busy one after its call; resolves once all closed. */
  close(): Promise<void>;
}

/** How much may wait in the socket's buffer before the calls stop pulling more frames. */
const HIGH_WATER_BYTES = 1024 * 1024;

/** Resolves once `socket` has written what it held, or is closed. */
function flushed(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      socket.off("drain", done);
      socket.off("close", done);
      resolve();
    };
    socket.on("drain", done);
    socket.on("close", done);
  });
}

/** One call a worker handed over: stopped by its worker, held while the worker's reader is behind. */
class HandedCall extends LightAbortController {
  #held: { promise: Promise<void>; resolve(): void } | null = null;

  /** Stops the call, and lets its frame loop go on to see that it stopped. */
  override abort(reason?: unknown): void {
    super.abort(reason);
    this.resume();
  }

  hold(): void {
    if (this.#held) return;
    let resolve = () => {};
    const promise = new Promise<void>((r) => (resolve = r));
    this.#held = { promise, resolve };
  }

  resume(): void {
    this.#held?.resolve();
    this.#held = null;
  }

  /** Resolves once the call is not held (or was stopped). */
  released(): Promise<void> | undefined {
    return this.#held?.promise;
  }
}

/** One worker's connection: its hello, then its calls, as many at once as it hands over. */
class WorkerConnection {
  readonly #socket: Socket;
  readonly #options: WorkerCallsOptions;
  /** Splits what arrives into lines; a call's header line announces its body's bytes (see `#onLine`). */
  readonly #lines = new LineSplitter(MAX_HEADER_BYTES + 1, { payloadBytes: (line) => this.#onLine(line) });
  /** Calls whose header was read, in order, waiting for their bodies. */
  readonly #awaitingBody: Array<{ id: number; header: CallHeader }> = [];
  readonly #calls = new Map<number, HandedCall>();
  /** Slots held for the worker's direct calls, by the id it asked with; released when it says so or leaves. */
  readonly #slots = new Map<number, WireSlot>();
  /** The worker's node:cluster id, as it said with its token; slots are given only to a worker that said it. */
  #workerId: number | undefined;
  #greeted = false;
  #closing = false;

  constructor(socket: Socket, options: WorkerCallsOptions) {
    this.#socket = socket;
    this.#options = options;
    socket.on("data", (chunk: Buffer) => this.#read(chunk));
    socket.on("error", () => {});
    socket.on("close", () => {
      for (const call of this.#calls.values()) call.abort(gone());
      this.#calls.clear();
      for (const slot of this.#slots.values()) slot.release();
      this.#slots.clear();
    });
  }

  /** Closes the connection now when no call or slot is on it, else once its last one ends. */
  close(): void {
    this.#closing = true;
    this.#endIfIdle();
  }

  #endIfIdle(): void {
    if (this.#closing && this.#calls.size === 0 && this.#slots.size === 0) this.#socket.end();
  }

  #refuse(reason: string): void {
    this.#options.logger.warn({ reason }, "a connection to the supervisor's socket broke its protocol; closed");
    this.#socket.destroy();
  }

  /** Reads what arrived: lines are handled as they are split off (`#onLine`); each call whose body is whole runs. */
  #read(chunk: Buffer): void {
    let read: Array<Buffer | Payload>;
    try {
      read = this.#lines.push(chunk);
    } catch (error) {
      if (error instanceof LineTooLong) return this.#refuse("a line too long");
      throw error;
    }
    for (const item of read) {
      if (this.#socket.destroyed) return;
      if (Buffer.isBuffer(item)) continue; // a line without a body: handled as it was split off
      const { id, header } = this.#awaitingBody.shift()!;
      void this.#run(id, header, Buffer.concat(item.chunks));
    }
  }

  /**
   * Handles one line as the splitter splits it off, in order: the hello, then calls' controls and headers.
   * Answers how many bytes of body follow it: a call's header's `n` (an empty body runs the call at once).
   */
  #onLine(line: Buffer): number {
    if (this.#socket.destroyed) return 0;
    if (!this.#greeted) {
      this.#hello(line);
      return 0;
    }
    const parsed = splitId(line.toString("utf8"));
    if (!parsed) {
      this.#refuse("a line without an id");
      return 0;
    }
    const header = this.#control(parsed.id, parsed.rest);
    if (!header) return 0;
    if (header.n === 0) {
      void this.#run(parsed.id, header, Buffer.alloc(0));
      return 0;
    }
    this.#awaitingBody.push({ id: parsed.id, header });
    return header.n;
  }

  /** The worker's hello: its token (checked in constant time) and its node:cluster id. */
  #hello(line: Buffer): void {
    const token = Buffer.from(this.#options.token);
    const [hex, workerId] = line.toString("latin1").split(" ");
    const said = Buffer.from(hex, "hex");
    if (said.length !== token.length || !timingSafeEqual(said, token)) return this.#refuse("a wrong token");
    this.#greeted = true;
    // Written at once, not in turn: it leaves before any call after it on the connection can start
    // its function, so a worker that never read it knows none did.
    this.#socket.write(`${HELLO_ACCEPTED}\n`);
    if (workerId !== undefined && /^\d{1,9}$/.test(workerId)) this.#workerId = Number(workerId);
    const gate = this.#options.gate;
    if (gate) {
      gate.enter();
      this.#socket.once("close", () => gate.leave());
    }
  }

  /** Acts on a control of a call; answers a call's header when the line is one (nothing when it was refused). */
  #control(id: number, rest: string): CallHeader | undefined {
    const call = this.#calls.get(id);
    if (rest === "x") call?.abort(stopped(id));
    else if (rest === "p") call?.hold();
    else if (rest === "r") call?.resume();
    else if (rest === "f") {
      this.#slots.get(id)?.release();
      this.#slots.delete(id);
      this.#endIfIdle();
    } else if (rest.startsWith("s ")) this.#slot(id, rest.slice(2));
    else {
      let header: unknown;
      try {
        header = JSON.parse(rest);
      } catch {
        this.#refuse("a header that is not JSON");
        return undefined;
      }
      if (!isCallHeader(header) || this.#calls.has(id) || this.#awaitingBody.some((call) => call.id === id)) {
        this.#refuse("a malformed header");
        return undefined;
      }
      if (header.n > this.#options.bodyLimitBytes) {
        this.#refuse("a body past the limit");
        return undefined;
      }
      return header;
    }
    return undefined;
  }

  /** Answers a slot request (`<id> s {"p","a"}`): the slot (keyed `seat`), or `relay` (hand the call over instead). */
  #slot(id: number, rest: string): void {
    let asked: { p?: unknown; a?: unknown };
    try {
      asked = JSON.parse(rest);
    } catch {
      return this.#refuse("a slot request that is not JSON");
    }
    if (typeof asked?.p !== "string" || typeof asked.a !== "string" || this.#slots.has(id)) {
      return this.#refuse("a malformed slot request");
    }
    const slot = this.#workerId === undefined || this.#closing
      ? null
      : this.#options.slots?.slot(this.#workerId, asked.p, asked.a) ?? null;
    if (!slot) {
      writeInTurn(this.#socket, `${id} {"relay":true}\n`);
      return;
    }
    this.#slots.set(id, slot);
    const answer = { replica: slot.replica, deploymentId: slot.deploymentId, graceMs: slot.graceMs, keep: slot.keep };
    writeInTurn(this.#socket, `${id} ${JSON.stringify({ seat: answer })}\n`);
  }

  /** Runs one call and writes its frames, waiting while the socket or the call's reader is behind. */
  async #run(id: number, header: CallHeader, body: Buffer): Promise<void> {
    const call = new HandedCall();
    this.#calls.set(id, call);
    const socket = this.#socket;
    const prefix = `${id} `;
    try {
      const frames = serveForwardedCall({
        projectId: header.p,
        appId: header.a,
        functionName: header.f,
        runId: header.r,
        // A call by another method than POST: its body is the app's, as sent.
        inputJson: header.m === undefined ? body.toString("utf8") : "",
        http: header.m === undefined ? undefined : { method: header.m, query: header.q!, headers: header.hd!, body },
        deadlineMs: header.d,
        signal: call.signal,
      }, header.h ? this.#options.hereExecutor ?? this.#options.executor : this.#options.executor);
      for await (const line of frames) {
        if (socket.destroyed || call.aborted) break;
        writeInTurn(socket, prefix + line);
        if (socket.writableLength > HIGH_WATER_BYTES) await flushed(socket);
        await call.released();
      }
    } catch (error) {
      this.#options.logger.error({ err: error, run_id: header.r }, "a worker's call failed in the supervisor");
      socket.destroy();
    } finally {
      this.#calls.delete(id);
      call.resume();
    }
    this.#endIfIdle();
  }
}

/** Why a call stops when its worker's connection closed. */
function gone(): Error {
  return new Error("the worker's connection closed");
}

/** Why a call stops when its worker gave it up. */
function stopped(id: number): Error {
  return new Error(`the worker gave call ${id} up`);
}

/** Listens on `path` (replaced if it exists; made 0600 before anyone can connect) for the workers' calls. */
export async function listenForWorkerCalls(path: string, options: WorkerCallsOptions): Promise<WorkerCallsServer> {
  await rm(path, { force: true });
  const connections = new Set<WorkerConnection>();
  const server: Server = createServer((socket) => {
    const connection = new WorkerConnection(socket, options);
    connections.add(connection);
    socket.once("close", () => connections.delete(connection));
  });
  await new Promise<void>((resolve, reject) => {
    // The socket file takes the process's umask: private from the start.
    const umask = process.umask(0o177);
    server.listen(path);
    process.umask(umask);
    server.once("error", reject);
    server.once("listening", () => resolve());
  });
  let closed: Promise<void> | undefined;
  return {
    close() {
      closed ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const connection of connections) connection.close();
      });
      return closed;
    },
  };
}
