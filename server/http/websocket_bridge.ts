/**
 * One WebSocket run's two connections joined (issue 47): the caller's (accepted by `ws`'s server) and the
 * app's (a `ws` client through the replica's relay). Frames pass both ways unchanged — text, binary,
 * pings and pongs, the close code and reason — while the bridge counts them, bounds what it holds, and
 * ends the run once, when both connections are closed.
 *
 * Hostile by default, either side: a message past `maxMessageBytes` closes both with 1009; a reader that
 * does not read pauses the other side's socket once `HIGH_WATER` bytes wait for it (so the server's
 * memory stays bounded per connection); a side that answers no ping within `pingIntervalMs` is gone; a
 * side that does not finish the close handshake is cut after `CLOSE_GRACE_MS`.
 */
import { randomBytes } from "node:crypto";
import type WebSocket from "ws";
import type { AppWebSocket } from "../runtime/mod.ts";
import type { LiveRun, WebSocketCounters } from "../runs/mod.ts";

/** Bytes waiting for one side past which the other side's socket is paused. */
export const HIGH_WATER = 1024 * 1024;
/** Bytes waiting below which it is read again. */
const LOW_WATER = 256 * 1024;
/** How long a side may take to answer a close frame before its connection is cut. */
const CLOSE_GRACE_MS = 5_000;

type Side = "caller" | "app";

/** How the run ends: success (a side closed it), cancelled, or a failure of this type and message. */
type Outcome =
  | { status: "success" }
  | { status: "cancelled" }
  | { status: "failure"; type: string; message: string };

/**
 * What the bridge needs of its run: the run itself on the host that records it, or a stand-in that records
 * nothing on a host that only opened the replica for another host's run (`websocket_forwarded.ts`).
 */
export type BridgedRun = Pick<LiveRun, "runId" | "signal" | "countWebSocket" | "succeed" | "cancelled" | "fail">;

/** Options of `WebSocketBridge`. */
export interface BridgeOptions {
  /** The largest message either side may send (enforced by `ws` as each side's `maxPayload`). */
  maxMessageBytes: number;
  pingIntervalMs: number;
  /** Told once, when the run has ended and both connections are closed. */
  onEnded(): void;
}

/** The close codes `ws` refuses to send: 1005 (no code) and 1006 (no close frame) are never on the wire. */
function sendable(code: number): boolean {
  return (code >= 1000 && code <= 1014 && code !== 1004 && code !== 1005 && code !== 1006)
    || (code >= 3000 && code <= 4999);
}

/** A close reason cut to the 123 bytes a close frame holds. */
function shortReason(reason: string): string {
  const bytes = Buffer.from(reason);
  return bytes.length <= 123 ? reason : bytes.subarray(0, 120).toString("utf8").replace(/\uFFFD$/, "") + "...";
}

/** The close code `ws` sent a side for an error it found in that side's frames. */
function codeOf(error: { code?: string }): number {
  if (error.code === "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH") return 1009;
  if (error.code === "WS_ERR_INVALID_UTF8") return 1007;
  return 1002;
}

/** A WebSocket run's two connections, joined until both are closed. */
export class WebSocketBridge {
  readonly #caller: WebSocket;
  readonly #app: AppWebSocket;
  readonly #run: BridgedRun;
  readonly #options: BridgeOptions;
  readonly #counters: WebSocketCounters = {
    messages_in: 0,
    messages_out: 0,
    bytes_in: 0,
    bytes_out: 0,
    close_code: null,
    close_reason: "",
    closed_by: "caller",
  };
  /** The payload of the bridge's own pings: their pongs are not passed on. */
  readonly #pingToken = randomBytes(12);
  readonly #heard = { caller: true, app: true };
  readonly #paused = { caller: false, app: false };
  readonly #closed = { caller: false, app: false };
  #outcome: Outcome | undefined;
  #pinger: ReturnType<typeof setInterval> | undefined;
  #deadline: ReturnType<typeof setTimeout> | undefined;
  #ended = false;

  constructor(caller: WebSocket, app: AppWebSocket, options: BridgeOptions & { run: BridgedRun }) {
    this.#caller = caller;
    this.#app = app;
    this.#run = options.run;
    this.#options = options;
    options.run.countWebSocket(() => ({ ...this.#counters }));
    this.#join("caller", caller, app.socket);
    this.#join("app", app.socket, caller);
    app.socket.resume();
    this.#pinger = setInterval(() => this.#ping(), options.pingIntervalMs);
    this.#deadline = setTimeout(() => {
      const seconds = Math.round(app.graceMs / 1000);
      this.close(1001, `The run reached its response_grace_period (${seconds} s)`, {
        status: "failure",
        type: "timeout",
        message: `The WebSocket was open for its response_grace_period (${seconds} s) and was closed`,
      });
    }, app.graceMs);
    options.run.signal.addEventListener("abort", () => {
      this.close(1000, "The run was cancelled", { status: "cancelled" });
    }, { once: true });
    void app.replicaGone.then(() => {
      if (!this.#closed.app) app.socket.terminate();
    });
  }

  /** Bytes waiting to be written to either side now. */
  get bufferedAmount(): number {
    return this.#caller.bufferedAmount + this.#app.socket.bufferedAmount;
  }

  /** Whether both connections closed and the run ended. */
  get ended(): boolean {
    return this.#ended;
  }

  /**
   * Closes both connections with `code` and `reason` (the server's decision: a cancel, the grace period,
   * a drain), unless one already began closing; the run ends with `outcome`.
   */
  close(code: number, reason: string, outcome: Outcome): void {
    if (this.#outcome) return;
    this.#outcome = outcome;
    this.#noteClose("server", code, reason);
    for (const socket of [this.#caller, this.#app.socket]) this.#closeSocket(socket, code, reason);
  }

  #join(side: Side, from: WebSocket, to: WebSocket): void {
    from.on("message", (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
      this.#heard[side] = true;
      const size = Array.isArray(data) ? data.reduce((sum, part) => sum + part.length, 0) : data.byteLength;
      if (side === "caller") {
        this.#counters.messages_in++;
        this.#counters.bytes_in += size;
      } else {
        this.#counters.messages_out++;
        this.#counters.bytes_out += size;
      }
      if (to.readyState !== to.OPEN) return;
      to.send(data, { binary: isBinary }, () => this.#drained(side, to));
      if (!this.#paused[side] && to.bufferedAmount > HIGH_WATER) {
        // The other side reads slower than this one writes: stop reading this one until it catches up.
        this.#paused[side] = true;
        from.pause();
      }
    });
    from.on("ping", (data: Buffer) => {
      this.#heard[side] = true;
      if (to.readyState === to.OPEN) to.ping(data);
    });
    from.on("pong", (data: Buffer) => {
      this.#heard[side] = true;
      if (!data.equals(this.#pingToken) && to.readyState === to.OPEN) to.pong(data);
    });
    from.on("error", (error: Error & { code?: string }) => {
      // `ws` closed this side already, with the code that says what was wrong in its frames.
      const code = codeOf(error);
      const who = side === "caller" ? "The caller" : "The app's server";
      const message = code === 1009
        ? `${who} sent a message larger than RUNPLANE_WS_MAX_MESSAGE (${this.#options.maxMessageBytes} bytes)`
        : `${who} broke the WebSocket protocol: ${error.message}`;
      this.#endWith(side, code, code === 1009 ? "Message too big" : "Protocol error", {
        status: "failure",
        type: code === 1009 ? "too_large" : "protocol_violation",
        message,
      });
      this.#closeSocket(to, code, code === 1009 ? "Message too big" : "Protocol error");
    });
    from.on("close", (code: number, reason: Buffer) => {
      this.#closed[side] = true;
      this.#resume();
      this.#sideClosed(side, { code, reason: reason.toString("utf8"), to });
      if (this.#closed.caller && this.#closed.app) this.#end();
    });
  }

  /** A side's connection closed: its close goes on to the other side (or 1011/1001 when it just broke). */
  #sideClosed(side: Side, close: { code: number; reason: string; to: WebSocket }): void {
    if (this.#outcome) {
      this.#closeSocket(close.to, 1000, "");
      return;
    }
    const { code, reason, to } = close;
    if (code !== 1006) {
      // Another host's 1011 is its replica failing there (or its app's error): the run failed.
      const failed = side === "app" && code === 1011 && this.#app.remote === true;
      this.#endWith(
        side,
        code === 1005 ? null : code,
        reason,
        failed
          ? {
            status: "failure",
            type: "upstream_error",
            message: `The app's server on the host holding its replica failed: ${reason || "1011"}`,
          }
          : { status: "success" },
      );
      if (code === 1005 || !sendable(code)) this.#closeSocket(to, undefined, "");
      else this.#closeSocket(to, code, reason);
      return;
    }
    if (side === "caller") {
      // The caller went away without a close frame: the run is cancelled, as a stream's reader gone is.
      this.#endWith(side, null, "", { status: "cancelled" });
      this.#closeSocket(to, 1001, "The caller went away");
      return;
    }
    const limit = this.#app.oomLimit();
    const failure: Outcome = limit !== undefined
      ? { status: "failure", type: "out-of-memory", message: `The app's server ran out of memory (${limit} bytes)` }
      : {
        status: "failure",
        type: "upstream_error",
        message: "The app's server closed the WebSocket without a close frame (its replica may have died)",
      };
    this.#endWith("app", 1011, "The app's server failed", failure);
    this.#closeSocket(to, 1011, "The app's server failed");
  }

  #endWith(side: Side | "server", code: number | null, reason: string, outcome: Outcome): void {
    if (this.#outcome) return;
    this.#outcome = outcome;
    this.#noteClose(side, code, reason);
  }

  #noteClose(side: Side | "server", code: number | null, reason: string): void {
    this.#counters.closed_by = side;
    this.#counters.close_code = code;
    this.#counters.close_reason = shortReason(reason);
  }

  /** Starts the close handshake with `socket` (none when it is closing already); cuts it if it lingers. */
  #closeSocket(socket: WebSocket, code: number | undefined, reason: string): void {
    if (socket.readyState === socket.CLOSED) return;
    if (socket.readyState === socket.OPEN) {
      if (code === undefined) socket.close();
      else socket.close(code, shortReason(reason));
    }
    setTimeout(() => socket.terminate(), CLOSE_GRACE_MS).unref();
  }

  #drained(side: Side, to: WebSocket): void {
    if (this.#paused[side] && to.bufferedAmount <= LOW_WATER) {
      this.#paused[side] = false;
      (side === "caller" ? this.#caller : this.#app.socket).resume();
    }
  }

  /** Reads both sides again: a close frame must be read, whoever is slow. */
  #resume(): void {
    for (const side of ["caller", "app"] as const) {
      if (!this.#paused[side]) continue;
      this.#paused[side] = false;
      (side === "caller" ? this.#caller : this.#app.socket).resume();
    }
  }

  #ping(): void {
    for (const [side, socket] of [["caller", this.#caller], ["app", this.#app.socket]] as const) {
      if (socket.readyState !== socket.OPEN) continue;
      if (!this.#heard[side]) {
        const who = side === "caller" ? "caller" : "app's server";
        // A caller gone silent went away (cancelled); an app gone silent failed.
        const outcome: Outcome = side === "caller" ? { status: "cancelled" } : {
          status: "failure",
          type: "upstream_error",
          message: `The app's server answered no ping for ${this.#options.pingIntervalMs} ms`,
        };
        this.#endWith("server", 1001, `The ${who} stopped answering pings`, outcome);
        socket.terminate();
        const other = side === "caller" ? this.#app.socket : this.#caller;
        this.#closeSocket(other, 1001, `The ${who} stopped answering pings`);
        continue;
      }
      this.#heard[side] = false;
      socket.ping(this.#pingToken);
    }
  }

  /** Both connections are closed: the slot is free and the run ends, once. */
  #end(): void {
    if (this.#ended) return;
    this.#ended = true;
    clearInterval(this.#pinger);
    clearTimeout(this.#deadline);
    this.#app.release();
    const outcome = this.#outcome ?? { status: "success" };
    const run = this.#run;
    // A record the store refused is kept and retried by the writer, which logs it: nobody answers here.
    const ended = outcome.status === "success"
      ? run.succeed(null)
      : outcome.status === "cancelled"
      ? run.cancelled()
      : run.fail({ type: outcome.type, message: outcome.message, traceback: null });
    void ended.catch(() => undefined).finally(() => this.#options.onEnded());
  }
}
