/**
 * The frames of a forwarded call's answer: NDJSON, one JSON object a line, written by the host that runs
 * the call and read by the one that forwarded it.
 *
 * ```text
 * {"deployment": id}                                   the replica's deployment, before the function runs
 * {"result": value, "runTimeMs": n}                    the function returned
 * {"stream": true} {"item": value, "event"?: name}… {"end": true}    the function streamed
 * {"response": {"status", "headers"}} {"chunk": base64}… {"end": true}   a custom runtime's answer to
 *                                                      a call by another method, its body as it comes
 * {"error": {"type", "message", "traceback"}}          the function failed (at any point)
 * {"problem": {"status", "type", "detail", "retryAfter"?}}   it could not run (no app, queue full, …)
 * ```
 */
import { LineSplitter } from "../lines/mod.ts";
import type { RunErrorInfo } from "../runs/mod.ts";

/** A problem the remote answered instead of running the call: `type` is the problem's kind (`not-found`). */
export interface ProblemFrame {
  status: number;
  type: string;
  detail: string;
  /** The problem's `Retry-After`, when it had one. */
  retryAfter?: string;
  /** A 405's `Allow` (the methods the app takes). */
  allow?: string;
}

/** One frame, as read. */
export interface Frame {
  deployment?: string;
  result?: unknown;
  runTimeMs?: number;
  stream?: true;
  item?: unknown;
  event?: string;
  /** A custom runtime's answer passed through: its status and headers (name, value); its body follows. */
  response?: { status: number; headers: Array<[string, string]> };
  /** A piece of that answer's body, base64. */
  chunk?: string;
  end?: true;
  error?: RunErrorInfo;
  problem?: ProblemFrame;
}

/** A frame as one NDJSON line, newline included. */
export function frameLine(frame: Frame): string {
  return `${JSON.stringify(frame)}\n`;
}

/** The largest frame line read: a result or item is bounded by the replica's own limits well below it. */
export const MAX_FRAME_BYTES = 1024 ** 3;

/** Splits byte chunks into frame lines (without their newline) of at most `MAX_FRAME_BYTES`. */
export class FrameSplitter {
  readonly #lines = new LineSplitter(MAX_FRAME_BYTES);

  /** The complete lines `chunk` ends; throws `LineTooLong` once a line passes `MAX_FRAME_BYTES`. */
  push(chunk: Buffer): Buffer[] {
    // No line announces a payload here, so every item is a line.
    return this.#lines.push(chunk) as Buffer[];
  }

  /** Bytes held of a line whose newline has not arrived. */
  get pendingBytes(): number {
    return this.#lines.pendingBytes;
  }
}
