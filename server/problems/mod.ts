/**
 * RFC 9457 problem documents, free of any HTTP framework: domain modules throw `ProblemError`, the HTTP
 * layer renders it as `application/problem+json`.
 */

/** Where problem type URIs live; each kind of error has a stable `type` under it. */
export const PROBLEM_BASE = "https://runplane.dev/problems/";

/** One field that failed validation. */
export interface FieldError {
  path: string;
  message: string;
}

/** The members of a problem document. */
export interface ProblemDocument {
  type: string;
  title: string;
  status: number;
  detail?: string;
  instance?: string;
  run_id?: string;
  errors?: FieldError[];
  exception_type?: string;
  traceback?: string;
}

/** Options of `ProblemError`: the document's optional members and response headers. */
export interface ProblemOptions {
  detail?: string;
  runId?: string;
  errors?: FieldError[];
  exceptionType?: string;
  traceback?: string;
  /** Extra response headers, e.g. `Retry-After` or `WWW-Authenticate`. */
  headers?: Record<string, string>;
  cause?: unknown;
}

/** The kinds of problem the service answers, each with its status and title. */
export const PROBLEM_KINDS = {
  "validation": { status: 400, title: "Request validation failed" },
  "malformed-json": { status: 400, title: "Malformed JSON body" },
  "bad-request": { status: 400, title: "Bad request" },
  "unauthorized": { status: 401, title: "Authentication required" },
  "forbidden": { status: 403, title: "Forbidden" },
  "not-found": { status: 404, title: "Not found" },
  "method-not-allowed": { status: 405, title: "Method not allowed" },
  "request-timeout": { status: 408, title: "Request timeout" },
  "conflict": { status: 409, title: "Conflict" },
  "interrupted": { status: 409, title: "The run was interrupted" },
  "content-too-large": { status: 413, title: "Request body too large" },
  "unsupported-media-type": { status: 415, title: "Unsupported media type" },
  "range-not-satisfiable": { status: 416, title: "Range not satisfiable" },
  "request-header-fields-too-large": { status: 431, title: "Request header fields too large" },
  "unprocessable": { status: 422, title: "Unprocessable request" },
  "too-many-requests": { status: 429, title: "Too many requests" },
  "internal": { status: 500, title: "Internal server error" },
  "function-error": { status: 500, title: "The function raised an exception" },
  "bad-gateway": { status: 502, title: "Bad gateway" },
  "worker-crashed": { status: 502, title: "The worker process died during the call" },
  "out-of-memory": { status: 502, title: "The replica ran out of memory" },
  "service-unavailable": { status: 503, title: "Service unavailable" },
  "app-unavailable": { status: 503, title: "The app failed to load" },
  "store-unavailable": { status: 503, title: "The store is unavailable" },
  "sandbox-unavailable": { status: 503, title: "Tenants' code cannot be jailed on this server" },
  "gateway-timeout": { status: 504, title: "The function timed out" },
} as const;

/** A kind of problem, named by the last segment of its `type` URI. */
export type ProblemKind = keyof typeof PROBLEM_KINDS;

/** An error that becomes a problem document with its status. */
export class ProblemError extends Error {
  readonly kind: ProblemKind;
  readonly status: number;
  readonly options: ProblemOptions;

  constructor(kind: ProblemKind, detail: string, options: Omit<ProblemOptions, "detail"> = {}) {
    super(detail, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "ProblemError";
    this.kind = kind;
    this.status = PROBLEM_KINDS[kind].status;
    this.options = { ...options, detail };
  }

  /** The problem document for this error, with `instance` set to the request path. */
  toDocument(instance?: string): ProblemDocument {
    const { detail, runId, errors, exceptionType, traceback } = this.options;
    return {
      type: PROBLEM_BASE + this.kind,
      title: PROBLEM_KINDS[this.kind].title,
      status: this.status,
      ...(detail ? { detail } : {}),
      ...(instance ? { instance } : {}),
      ...(runId ? { run_id: runId } : {}),
      ...(errors ? { errors } : {}),
      ...(exceptionType ? { exception_type: exceptionType } : {}),
      ...(traceback ? { traceback } : {}),
    };
  }
}

/** Whether `value` is a `ProblemError` (also across module copies). */
export function isProblemError(value: unknown): value is ProblemError {
  return value instanceof ProblemError;
}
