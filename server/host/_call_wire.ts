/**
 * The wire between a host's workers and its supervisor: how a worker hands calls over the supervisor's
 * Unix socket (`<data dir>/supervisor.sock`). It replaced the cluster's HTTP hop there, which cost the
 * supervisor ~400–500 µs of CPU per call (an HTTP request through Koa, a signed credential, a Readable per
 * answer) against ~150–200 µs for a whole call made to a single process.
 *
 * ```text
 * worker → supervisor   <token hex> <worker id>\n            first, once (its node:cluster id)
 *                       <id> {"p","a","f","r","n","d"?,"h"?,"m"?,"q"?,"hd"?}\n<n bytes>   a call:
 *                                                       project, app, function, run id, its body's
 *                                                       length (the body follows), deadline, h: 1 for a
 *                                                       call another host of the cluster forwarded (run
 *                                                       here, never forwarded); and for a call of a
 *                                                       custom runtime's route by another method than
 *                                                       POST its method, query string and headers (its
 *                                                       body is the app's, as sent)
 *                       <id> x\n                           give the call up: its function is stopped
 *                       <id> p\n   <id> r\n                hold / resume the call's frames (its reader
 *                                                       fell behind / caught up)
 *                       <id> s {"p","a"}\n                 a slot for a direct call on a replica's
 *                                                       channel (`replica_channels.ts`)
 *                       <id> f\n                           give that slot back
 * supervisor → worker   ok\n                               first, once: the hello was accepted; the calls
 *                                                       on the connection are taken from then (one that
 *                                                       broke before this line ran none of them)
 *                       <id> <frame>\n                     the cluster's frames (`cluster/_frames.ts`),
 *                                                       a call's last one terminal
 *                       <id> {"seat":{"replica","deploymentId"?,"graceMs"}}\n   a slot (the key
 *                                                       keeps its first name, `seat`), or
 *                       <id> {"relay":true}\n              none free now: hand the call over
 * ```
 *
 * One connection per worker carries all its calls, each named by an id the worker picks (unique while the
 * call lasts). Each side writes what one turn of its event loop produced in one system call: on this kind
 * of host a write that wakes another process costs tens of microseconds, the largest part of the hop.
 * The socket is its user's alone (0600); the token keeps any other process that reaches it out.
 */
import type { Socket } from "node:net";

/** The supervisor's first line on a connection whose hello it accepted. */
export const HELLO_ACCEPTED = "ok";

/** A call's header: the JSON after its id on the line before its body. */
export interface CallHeader {
  /** The project. */
  p: string;
  /** The app. */
  a: string;
  /** The function. */
  f: string;
  /** The run's id. */
  r: string;
  /** The body's length in bytes (the function's arguments, JSON, as the caller sent them). */
  n: number;
  /** Milliseconds left of the run's time, when it has a deadline. */
  d?: number;
  /** 1: a call another host of the cluster forwarded here, run on this host's replicas only. */
  h?: 1;
  /** A call of a custom runtime's route by another method than POST: the method. */
  m?: string;
  /** Its query string, as sent. */
  q?: string;
  /** Its headers that reach the app (name, value). */
  hd?: Array<[string, string]>;
}

/** The longest line a header may be: its names are bounded well below it. */
export const MAX_HEADER_BYTES = 16 * 1024;

/** Whether `value` is a well-formed call header. */
export function isCallHeader(value: unknown): value is CallHeader {
  const h = value as CallHeader | null;
  return typeof h === "object" && h !== null && typeof h.p === "string" && typeof h.a === "string"
    && typeof h.f === "string" && typeof h.r === "string" && Number.isSafeInteger(h.n) && h.n >= 0
    && (h.d === undefined || (Number.isSafeInteger(h.d) && h.d >= 0)) && (h.h === undefined || h.h === 1)
    && (h.m === undefined || isHttpPart(h));
}

/** Whether a header's `m`, `q` and `hd` are well-formed. */
function isHttpPart(h: CallHeader): boolean {
  return typeof h.m === "string" && /^[A-Z]{1,16}$/.test(h.m) && typeof h.q === "string" && Array.isArray(h.hd)
    && h.hd.every((pair) => Array.isArray(pair) && pair.length === 2 && pair.every((x) => typeof x === "string"));
}

/** Whether a frame is a call's last: a result, the end of a stream, a failure or a problem. */
export function isTerminalFrame(frame: Record<string, unknown>): boolean {
  return "result" in frame || frame.end === true || frame.error !== undefined || frame.problem !== undefined;
}

/** A line's id and the rest after the space, or null when it has none. */
export function splitId(line: string): { id: number; rest: string } | null {
  const space = line.indexOf(" ");
  if (space <= 0 || space > 15) return null;
  const id = Number(line.slice(0, space));
  return Number.isSafeInteger(id) && id >= 0 ? { id, rest: line.slice(space + 1) } : null;
}

/**
 * Writes what one pass of the event loop gives `socket` in one system call: the first write corks it,
 * and it is uncorked after the pass's I/O callbacks (`setImmediate`), so the answers of every message a
 * replica's pipe or a worker's socket brought in that pass leave together.
 */
export function writeInTurn(socket: Socket, data: string | Buffer): boolean {
  if (socket.writableCorked === 0) {
    socket.cork();
    setImmediate(() => socket.uncork());
  }
  return socket.write(data);
}
