/** What a call gives back: a JSON result, or a stream of items read as they are produced. */

/** One streamed item: a yielded value (strings as they are), with an SSE event name from a custom runtime. */
export interface StreamItem {
  value: unknown;
  event?: string;
}

/**
 * A call of a custom runtime's route by another method than POST (issue 47): what is passed to the app
 * besides the path (the call's function name).
 */
export interface HttpCall {
  method: string;
  /** The query string as sent, without `?`; empty for none. */
  query: string;
  /** The caller's headers that reach the app, as name and value. */
  headers: Array<[string, string]>;
  /** The body as sent; empty for none. */
  body: Uint8Array;
}

/**
 * A call's outcome. A stream's slot is held until its items are read to the end or the reader stops; an
 * HTTP answer's (`response`: the app's 2xx status, its headers, its body as it comes) until its body is.
 */
export type CallOutcome =
  | { kind: "result"; result: unknown; runTimeMs: number }
  | { kind: "stream"; items: AsyncIterable<StreamItem>; startedAt: number }
  | { kind: "response"; status: number; headers: Array<[string, string]>; body: AsyncIterable<Uint8Array> };
