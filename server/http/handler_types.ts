/**
 * Handler types derived from the generated `operations`: a handler map typed with `satisfies Handlers`
 * fails to compile when a handler is missing or returns something the contract does not allow.
 */
import type { operations } from "../../generated/api.d.ts";
import type { OperationId as RoutedOperationId } from "../../generated/routes.ts";
import type { Principal } from "../auth/mod.ts";
import type { SpooledBody } from "./spool_body.ts";
import type { EventWriter } from "./sse.ts";
import type { StreamedBody } from "./streamed_body.ts";

/** An operation id of the contract's paths (webhooks are sent, not served). */
export type OperationId = RoutedOperationId & keyof operations;

type Parameters<K extends OperationId> = operations[K]["parameters"];
type Part<P, F extends string> = F extends keyof P
  ? ([NonNullable<P[F]>] extends [never] ? Record<never, never> : NonNullable<P[F]>)
  : Record<never, never>;
type JsonBodyOf<C> = C extends { "application/json": infer J } ? J : never;
/**
 * A body of any other media type (a bundle) arrives spooled to a temporary file; a body an operation takes
 * in any media type (`*\/*`: a custom runtime's route) arrives as its bytes; an `application/octet-stream`
 * body (a volume's file) arrives as the request's stream.
 */
type BytesBodyOf<C> = "*/*" extends keyof C ? Uint8Array
  : "application/octet-stream" extends keyof C ? StreamedBody
  : [Exclude<keyof C, "application/json">] extends [never] ? never
  : SpooledBody;
type RequestBodyOf<K extends OperationId> = operations[K] extends { requestBody?: infer B }
  ? [NonNullable<B>] extends [never] ? undefined
  : NonNullable<B> extends { content: infer C } ? JsonBodyOf<C> | BytesBodyOf<C> | undefined
  : undefined
  : undefined;

/**
 * A server-sent-event stream body: chunks of already-framed SSE text, written as they come, or an
 * `EventWriter` (`eventStream`) that writes itself.
 */
export type EventStreamBody = AsyncIterable<string | Uint8Array> | EventWriter;

/** Something `abortOnDisconnect` can abort: an `AbortController`, a run. */
export interface Abortable {
  abort(reason: unknown): void;
}

/**
 * Something a request's log line waits for and reports once it has ended (a run that a stream's body
 * keeps going after the handler has returned, or that ends after the client left).
 */
export interface LoggedOutcome {
  /** Whether it has ended: then `logFields()` is final. */
  readonly ended: boolean;
  /** Settles once it has ended. */
  readonly done: Promise<void>;
  /** The fields it adds to the request's log line. */
  logFields(): Record<string, unknown>;
}

/** A call of a custom runtime's route as it arrived, for what passes to the app (`passed_headers.ts`). */
export interface PassedRequest {
  method: string;
  /** The query string as sent, without `?`; empty for none. */
  query: string;
  /** The headers that reach the app, as name and value. */
  headers: Array<[string, string]>;
}

/** What a handler receives: decoded and validated parameters and body, and the caller. */
export interface HandlerInput<K extends OperationId> {
  path: Part<Parameters<K>, "path">;
  query: Part<Parameters<K>, "query">;
  header: Part<Parameters<K>, "header">;
  body: RequestBodyOf<K>;
  /**
   * The body's JSON text as received (valid, and `body` is its value), to forward it unchanged: numbers
   * JavaScript cannot hold exactly (2^60, 1e400) stay as the caller wrote them. Undefined without a body.
   */
  bodyText: string | undefined;
  /** The verified caller; null on operations without auth. */
  principal: Principal | null;
  /** The request id (sent back as `X-Request-Id`). */
  requestId: string;
  /** Replaces the request id, e.g. with the run id once a run exists (a method: call it on the input). */
  setRequestId(id: string): void;
  /** Aborted when the client goes away before the response is complete. */
  signal: AbortSignal;
  /**
   * Aborts `target` when the client goes away before the response is complete (at once if it has
   * already): for a single consumer, cheaper than `signal` (see server/abort/mod.ts).
   */
  abortOnDisconnect(target: Abortable): void;
  /** The request path, for problem documents' `instance`. */
  instance: string;
  /** For an operation that takes the rest of the path (a custom runtime's route): what passes to the app. */
  passed: PassedRequest | undefined;
  /** Adds fields to the request's one log line (e.g. the run it queued). */
  logFields(fields: Record<string, unknown>): void;
  /**
   * Adds `outcome`'s fields to the request's one log line, which then waits until `outcome` has ended
   * (at once when it ended before the response did): a sync or stream call logs once, with its run.
   */
  logOutcome(outcome: LoggedOutcome): void;
}

/**
 * Status codes a handler returns; errors are thrown as `ProblemError` instead. `2XX`: any 2xx status (a
 * custom runtime's, passed through).
 */
type SuccessStatus = 200 | 201 | 202 | 204 | 206 | 304 | "2XX";

/**
 * A body passed through in any media type (`*\/*`: a custom runtime's answer), written as it comes; its
 * handler names the media type in `headers` (`Content-Type`), or none.
 */
export type PassedBody = AsyncIterable<Uint8Array>;

type BodyOf<CT, T> = CT extends "text/event-stream" ? EventStreamBody
  : CT extends "*/*" | "application/octet-stream" ? PassedBody
  : T;

type StatusOf<S> = S extends "2XX" ? number : S;

type Variant<S, R> = R extends { content: infer C } ? {
    [CT in keyof C & string]: {
      status: StatusOf<S>;
      contentType: CT;
      body: BodyOf<CT, C[CT]>;
      headers?: Record<string, string | string[]>;
    };
  }[keyof C & string]
  : { status: StatusOf<S>; headers?: Record<string, string | string[]>; body?: undefined; contentType?: undefined };

type Responses<K extends OperationId> = operations[K]["responses"];

/** What a handler may return for operation `K`: one of its success responses. */
export type HandlerResult<K extends OperationId> = {
  [S in keyof Responses<K> & SuccessStatus]: Variant<S, Responses<K>[S]>;
}[keyof Responses<K> & SuccessStatus];

/** The handler of operation `K`. */
export type Handler<K extends OperationId> = (input: HandlerInput<K>) => Promise<HandlerResult<K>>;

/** One handler per operation of the contract. */
export type Handlers = { [K in OperationId]: Handler<K> };

/** Any handler, as the router calls it. */
export type AnyHandlerResult = {
  status: number;
  contentType?: string;
  body?: unknown;
  headers?: Record<string, string | string[]>;
};
