/** What a call gives back: a JSON result, or a stream of items read as they are produced. */

/** One streamed item: a yielded value (strings as they are), with an SSE event name from a custom runtime. */
export interface StreamItem {
  value: unknown;
  event?: string;
}

/** A call's outcome. A stream's slot is held until its items are read to the end or the reader stops. */
export type CallOutcome =
  | { kind: "result"; result: unknown; runTimeMs: number }
  | { kind: "stream"; items: AsyncIterable<StreamItem>; startedAt: number };
