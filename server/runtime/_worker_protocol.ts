/**
 * The protocol between the server and a Python worker (`_worker.py`), written down once. Both pipes carry
 * newline-delimited JSON, one message per line, each an object with an `op`:
 *
 * | direction       | op           | fields                                             | meaning                                         |
 * |-----------------|--------------|----------------------------------------------------|-------------------------------------------------|
 * | server → worker | `call`       | `id`, `run_id`, `fn`, `kwargs` (object)            | run `fn(**kwargs)`; `id` names the call below   |
 * | server → worker | `cancel`     | `id`                                               | stop that call (generators close at next yield) |
 * | server → worker | `credit`     | `id`, `items`, `bytes`                             | a stream's reader consumed that much: send more |
 * | worker → server | `ready`      | `pid`                                              | main.py loaded; calls may be sent               |
 * | worker → server | `load_error` | `type`, `message`, `traceback`                     | main.py failed to load; the worker exits        |
 * | worker → server | `log`        | `id`, `stream` (`stdout`/`stderr`), `text`         | the call's output                               |
 * | worker → server | `result`     | `id`, `value` or `bytes` (then the raw payload)    | the call returned (final)                       |
 * | worker → server | `stream`     | `id`                                               | the call returned an iterator: items follow     |
 * | worker → server | `item`       | `id`, `value`                                      | one yielded item                                |
 * | worker → server | `end`        | `id`                                               | the iterator is exhausted (final)               |
 * | worker → server | `cancelled`  | `id`                                               | the call stopped after a `cancel` (final)       |
 * | worker → server | `fail`       | `id`, `kind`, `type`, `message`, `traceback`?      | the call failed (final); `kind` says how        |
 * | worker → server | `batch`      | `fn`, `size`, `wait_ms`                            | a batch of a batched function left (metrics)    |
 *
 * A result whose JSON text is `RAW_RESULT_BYTES` (1 MiB) or longer travels as a header line
 * `{"op":"result","id":…,"bytes":N}` followed by exactly N bytes of its JSON text (ASCII, no newline
 * after it): the server checks that text a slice at a time and hands it through to the answer as is
 * (`RawJson`), never parsing it into a value, so a 50 MB result does not block the event loop. A
 * smaller result travels inline in `value`.
 *
 * Every call gets exactly one final message. Limits, the same on both sides:
 * - A message is at most `MAX_MESSAGE_BYTES` (64 MiB) of UTF-8 including its newline (a result's payload
 *   at most that many bytes). The worker refuses to send a bigger result or item (`fail`, kind
 *   `too_large`); a longer line, or a payload that is not the JSON text of one value, is a protocol
 *   violation.
 * - Streams flow under a window of credits: the worker may have up to `STREAM_WINDOW_ITEMS` items and
 *   `STREAM_WINDOW_BYTES` bytes (counted as whole `item` lines) sent and not yet consumed, and always at
 *   least one item. The server returns credit with `credit` as the stream's reader takes items, so a
 *   reader that stops reading stops the generator.
 *
 * An `item` line of `RAW_ITEM_BYTES` or more whose value is an object or array is read without parsing
 * it (`parseRawItem`): its value's bytes are checked to be the JSON text of one value and handed on as
 * they are (`RawJson`), so a stream of 64 KiB items is not decoded, parsed and encoded again per item.
 *
 * Everything a worker sends is untrusted: `parseWorkerMessage` turns a line into a `WorkerMessage` or
 * throws `ProtocolViolation`, and a violation ends that worker alone.
 */

import { RawJson } from "../json/mod.ts";
import { InvalidJson, JsonValidator } from "./_json_validator.ts";

/** The longest message either side may send, newline included. */
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
/** From this size on, a result's JSON text follows its `result` header as a raw payload. */
export const RAW_RESULT_BYTES = 1024 * 1024;
/** Items a stream may have sent and not yet consumed. */
export const STREAM_WINDOW_ITEMS = 64;
/** Bytes of `item` lines a stream may have sent and not yet consumed (one item may exceed it alone). */
export const STREAM_WINDOW_BYTES = 128 * 1024;

/**
 * From this line length on, an `item` is handed through as its value's JSON text (`parseRawItem`); up to
 * `BIG_MESSAGE_BYTES` of the replica (longer lines are parsed in turns of their own, as before).
 */
export const RAW_ITEM_BYTES = 16 * 1024;

/** How a call failed in the worker (`fail.kind`). */
export type FailKind =
  /** main.py has no such public function. */
  | "not_found"
  /** The arguments do not fit the function's signature. */
  | "invalid_arguments"
  /** The worker could not read the call message (e.g. nested too deeply for Python). */
  | "bad_request"
  /** The result is not JSON-serialisable. */
  | "not_serializable"
  /** The result or an item is larger than `MAX_MESSAGE_BYTES`. */
  | "too_large"
  /** A batched function's result is not a list with one element per call of its batch. */
  | "bad_batch_result"
  /** The function raised. */
  | "exception";

/** A message from the server to a worker. `kwargs` travels as the request's own JSON text. */
export type ServerMessage =
  | { op: "call"; id: string; run_id: string; fn: string; kwargs: Record<string, unknown> }
  | { op: "cancel"; id: string }
  | { op: "credit"; id: string; items: number; bytes: number };

/** A message from a worker to the server. */
export type WorkerMessage =
  | { op: "ready"; pid: number }
  | { op: "load_error"; type: string; message: string; traceback: string }
  | { op: "log"; id: string; stream: "stdout" | "stderr"; text: string }
  | { op: "result"; id: string; value: unknown }
  | { op: "result"; id: string; bytes: number }
  | { op: "stream"; id: string }
  | { op: "item"; id: string; value: unknown }
  | { op: "end"; id: string }
  | { op: "cancelled"; id: string }
  | { op: "fail"; id: string; kind: FailKind; type: string; message: string; traceback?: string }
  | { op: "batch"; fn: string; size: number; wait_ms: number };

/** A message about one call: every op but `ready`, `load_error` and `batch`. */
export type CallMessage = Extract<WorkerMessage, { id: string }>;

/** Something a worker sent that the protocol does not allow; the worker that sent it is ended. */
export class ProtocolViolation extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolViolation";
  }
}

type Check = (value: unknown) => boolean;

const isString: Check = (value) => typeof value === "string";
const isOptionalString: Check = (value) => value === undefined || value === null || typeof value === "string";
const isPid: Check = (value) => Number.isSafeInteger(value) && (value as number) > 0;
const isAny: Check = (value) => value !== undefined;
const isStream: Check = (value) => value === "stdout" || value === "stderr";
const FAIL_KINDS = new Set<string>([
  "not_found",
  "invalid_arguments",
  "bad_request",
  "not_serializable",
  "too_large",
  "bad_batch_result",
  "exception",
]);
const isBatchSize: Check = (value) => Number.isSafeInteger(value) && (value as number) > 0 && (value as number) <= 1024;
const isWait: Check = (value) => typeof value === "number" && Number.isFinite(value) && value >= 0;
const isFailKind: Check = (value) => typeof value === "string" && FAIL_KINDS.has(value);

/** The fields each op must carry, and what each must hold. */
const FIELDS: Record<WorkerMessage["op"], Record<string, Check>> = {
  ready: { pid: isPid },
  load_error: { type: isString, message: isString, traceback: isString },
  log: { id: isString, stream: isStream, text: isString },
  result: { id: isString },
  stream: { id: isString },
  item: { id: isString, value: isAny },
  end: { id: isString },
  cancelled: { id: isString },
  fail: { id: isString, kind: isFailKind, type: isString, message: isString, traceback: isOptionalString },
  batch: { fn: isString, size: isBatchSize, wait_ms: isWait },
};

/** A short, printable excerpt of untrusted text for an error message. */
function excerpt(text: string): string {
  const short = text.length > 80 ? `${text.slice(0, 80)}…` : text;
  return JSON.stringify(short);
}

/** Parses and checks one line from a worker; throws `ProtocolViolation` for anything the table above does not allow. */
export function parseWorkerMessage(line: string): WorkerMessage {
  let message: unknown;
  try {
    message = JSON.parse(line);
  } catch {
    throw new ProtocolViolation(`the worker sent a line that is not JSON: ${excerpt(line)}`);
  }
  if (message === null || typeof message !== "object" || Array.isArray(message)) {
    throw new ProtocolViolation(`the worker sent a message that is not a JSON object: ${excerpt(line)}`);
  }
  const op = (message as { op?: unknown }).op;
  const fields = typeof op === "string" && Object.hasOwn(FIELDS, op)
    ? FIELDS[op as WorkerMessage["op"]]
    : undefined;
  if (!fields) throw new ProtocolViolation(`the worker sent an unknown op ${excerpt(String(op))}`);
  for (const [name, check] of Object.entries(fields)) {
    if (!check((message as Record<string, unknown>)[name])) {
      throw new ProtocolViolation(`the worker sent a ${op} message with a missing or invalid ${name}`);
    }
  }
  if (op === "result" && isAny((message as { value?: unknown }).value) === isPayloadSize(message)) {
    throw new ProtocolViolation("the worker sent a result message without exactly one of value and bytes");
  }
  return message as WorkerMessage;
}

function isPayloadSize(message: object): boolean {
  const bytes = (message as { bytes?: unknown }).bytes;
  return Number.isSafeInteger(bytes) && (bytes as number) > 0 && (bytes as number) <= MAX_MESSAGE_BYTES;
}

const BYTES_FIELD = Buffer.from('"bytes"');

/**
 * How many payload bytes follow `line`: N for a well-formed `result` header with `bytes`, else 0 (a
 * line that is not one is checked by `parseWorkerMessage` as usual).
 */
export function payloadBytes(line: Buffer): number {
  // Most lines are logs and items: a substring search spares them a second parse.
  if (line.length > 4096 || !line.includes(BYTES_FIELD)) return 0;
  try {
    const message = JSON.parse(line.toString("utf8")) as { op?: unknown; value?: unknown; bytes?: number };
    return message?.op === "result" && message.value === undefined && isPayloadSize(message) ? message.bytes! : 0;
  } catch {
    return 0;
  }
}

const ITEM_HEAD = Buffer.from('{"op":"item","id":"');
const VALUE_FIELD = Buffer.from('","value":');

/**
 * An `item` line written as the worker writes it, `{"op":"item","id":"<id>","value":<value>}` with a
 * plain ASCII id and an object or array value, as that id and the value's bytes (`RawJson`, on `line`'s
 * memory), once the value is checked to be the JSON text of one value (ASCII, no line break, as
 * `ensure_ascii` writes it). Undefined for any other line: parse it with `parseWorkerMessage`, which
 * decides what it is (a value this refuses may still be valid JSON, e.g. UTF-8 text).
 */
export function parseRawItem(line: Buffer): { id: string; value: RawJson } | undefined {
  if (line.length < ITEM_HEAD.length + VALUE_FIELD.length + 3 || line[line.length - 1] !== 0x7d) return undefined;
  if (line.compare(ITEM_HEAD, 0, ITEM_HEAD.length, 0, ITEM_HEAD.length) !== 0) return undefined;
  const idEnd = line.indexOf(0x22, ITEM_HEAD.length);
  if (idEnd < 0 || line.compare(VALUE_FIELD, 0, VALUE_FIELD.length, idEnd, idEnd + VALUE_FIELD.length) !== 0) {
    return undefined;
  }
  for (let i = ITEM_HEAD.length; i < idEnd; i++) {
    // An escape, a control character or UTF-8 in the id: the parser reads it.
    if (line[i] === 0x5c || line[i] < 0x20 || line[i] >= 0x80) return undefined;
  }
  const value = line.subarray(idEnd + VALUE_FIELD.length, line.length - 1);
  // A string is decoded for its events; a carriage return (JSON whitespace) would break an event's line.
  if ((value[0] !== 0x7b && value[0] !== 0x5b) || value.includes(0x0d)) return undefined;
  try {
    const validator = new JsonValidator();
    validator.push(value);
    validator.end();
  } catch (error) {
    if (error instanceof InvalidJson) return undefined;
    throw error;
  }
  return { id: line.toString("latin1", ITEM_HEAD.length, idEnd), value: new RawJson([value], value.length) };
}

/** Whether a message ends its call: after it, no other message for the same id may follow but logs. */
export function isFinal(message: CallMessage): boolean {
  return message.op === "result" || message.op === "end" || message.op === "cancelled" || message.op === "fail";
}

/** Options of `encodeCall`. */
export interface EncodeCallOptions {
  /** The keyword arguments as JSON text of an object, as the caller sent it (validated, not re-serialised). */
  kwargsJson?: string;
}

/**
 * The line of a `call` message. The arguments are spliced in as JSON text: a request body is forwarded
 * as received, so numbers Python reads differently from JavaScript (2^60, 1e400) reach it intact. Line
 * breaks can only be whitespace in valid JSON text, so they become spaces.
 */
export function encodeCall(
  message: Extract<ServerMessage, { op: "call" }>,
  options: EncodeCallOptions = {},
): string {
  const kwargs = options.kwargsJson === undefined
    ? JSON.stringify(message.kwargs)
    : options.kwargsJson.replace(/[\r\n]/g, " ");
  // `id` first: a worker that cannot parse the line can still name the call it fails.
  return `{"op":"call","id":${JSON.stringify(message.id)},"run_id":${JSON.stringify(message.run_id)},"fn":${
    JSON.stringify(message.fn)
  },"kwargs":${kwargs}}\n`;
}

/** The line of a `cancel` or `credit` message. */
export function encodeControl(message: Exclude<ServerMessage, { op: "call" }>): string {
  return `${JSON.stringify(message)}\n`;
}
