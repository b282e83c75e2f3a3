/**
 * The input a handler receives, as a class, so that every request's input shares one hidden class.
 * It used to be an object literal with a getter and two closures; with those, each request stayed
 * reachable through the next scavenges (2.8 MB surviving each one, promoted, then collected by
 * mark-compacts every second): half of /healthz's CPU went to the garbage collector.
 */
import type { Principal } from "../auth/mod.ts";
import type { Abortable, HandlerInput, LoggedOutcome, OperationId, PassedRequest } from "./handler_types.ts";
import type { DecodedRequest } from "./request_decoding.ts";

/**
 * Where a request's id and log fields live; `setRequestId` replaces the id there (the HTTP layer sends it
 * as `X-Request-Id`) and the `log*` methods add to the request's log line.
 */
export interface RequestIdHolder {
  requestId: string;
  logFields?: Record<string, unknown>;
  logOutcome?: LoggedOutcome;
}

/** What a `RequestInput` is made from besides the decoded parameters. */
export interface RequestInputOptions {
  principal: Principal | null;
  ids: RequestIdHolder;
  /** The request path, for problem documents' `instance`. */
  instance: string;
  /** The JSON body's text as received, when the request had a body. */
  bodyText?: string;
  /** For an operation that takes the rest of the path: what passes to the app. */
  passed?: PassedRequest;
}

/**
 * A handler's input: decoded parameters and body, the caller, and a signal made on first use (or one
 * target to abort on disconnect, which costs no `AbortSignal`). It holds no per-request functions of its
 * own: a closure stored on it (even one never called) kept the whole request reachable to the scavenger
 * as well.
 */
export class RequestInput implements HandlerInput<OperationId> {
  path: HandlerInput<OperationId>["path"];
  query: HandlerInput<OperationId>["query"];
  header: HandlerInput<OperationId>["header"];
  body: HandlerInput<OperationId>["body"];
  bodyText: string | undefined;
  principal: Principal | null;
  instance: string;
  passed: PassedRequest | undefined;
  #ids: RequestIdHolder;
  #abort: AbortController | undefined = undefined;
  #target: Abortable | undefined = undefined;
  #disconnected = false;

  constructor(decoded: DecodedRequest, options: RequestInputOptions) {
    this.path = decoded.path as HandlerInput<OperationId>["path"];
    this.query = decoded.query as HandlerInput<OperationId>["query"];
    this.header = decoded.header as HandlerInput<OperationId>["header"];
    this.body = decoded.body as HandlerInput<OperationId>["body"];
    this.bodyText = options.bodyText;
    this.principal = options.principal;
    this.instance = options.instance;
    this.passed = options.passed;
    this.#ids = options.ids;
  }

  get requestId(): string {
    return this.#ids.requestId;
  }

  setRequestId(id: string): void {
    this.#ids.requestId = id;
  }

  logFields(fields: Record<string, unknown>): void {
    const ids = this.#ids;
    ids.logFields = ids.logFields ? Object.assign(ids.logFields, fields) : fields;
  }

  logOutcome(outcome: LoggedOutcome): void {
    this.#ids.logOutcome = outcome;
  }

  /** Aborted when the client goes away before the response is complete; made on first use. */
  get signal(): AbortSignal {
    if (!this.#abort) {
      this.#abort = new AbortController();
      if (this.#disconnected) this.#abort.abort(new Error("The client disconnected"));
    }
    return this.#abort.signal;
  }

  /** Aborts `target` when the client goes away before the response is complete (at once if it has). */
  abortOnDisconnect(target: Abortable): void {
    if (this.#disconnected) target.abort(new Error("The client disconnected"));
    else this.#target = target;
  }

  /** The client went away before the response was complete. */
  disconnect(): void {
    this.#disconnected = true;
    this.#abort?.abort(new Error("The client disconnected"));
    this.#target?.abort(new Error("The client disconnected"));
  }
}
