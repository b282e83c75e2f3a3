/**
 * The client's typed error: every non-success answer of the Runplane API (and every `event: error` of a
 * stream) becomes a `RunplaneError` carrying the RFC 9457 problem document.
 */
import type { components } from "../generated/api.d.ts";

/** An RFC 9457 problem document as the contract describes it. */
export type Problem = components["schemas"]["Problem"];

/** A failed call: `problem` is the server's problem document, `status` its HTTP status. */
export class RunplaneError extends Error {
  /** The problem document (synthesised from the status when the answer was not one). */
  readonly problem: Problem;
  /** The HTTP status of the answer, or the problem's status for a stream's `event: error`. */
  readonly status: number;
  /** The run the failure belongs to, when a run exists. */
  readonly runId: string | undefined;
  /** The answer's `X-Request-Id`, when there was one. */
  readonly requestId: string | undefined;

  constructor(problem: Problem, options: { status?: number; runId?: string; requestId?: string } = {}) {
    super(problem.detail ? `${problem.title}: ${problem.detail}` : problem.title);
    this.name = "RunplaneError";
    this.problem = problem;
    this.status = options.status ?? problem.status;
    this.runId = problem.run_id ?? options.runId;
    this.requestId = options.requestId;
  }
}

/** Whether `value` is a `RunplaneError`. */
export function isRunplaneError(value: unknown): value is RunplaneError {
  return value instanceof RunplaneError;
}

function isProblem(value: unknown): value is Problem {
  const v = value as Record<string, unknown> | null;
  return typeof v === "object" && v !== null && typeof v.title === "string" && typeof v.type === "string"
    && typeof v.status === "number";
}

/**
 * The `RunplaneError` for a failed `response`. `body` is its already-parsed body when the caller has
 * read it (openapi-fetch does); otherwise the body is read here. A body that is not a problem document
 * (a proxy's HTML page, say) becomes a generic problem with the status text.
 */
export async function errorFromResponse(response: Response, body?: unknown): Promise<RunplaneError> {
  let parsed = body;
  if (parsed === undefined && !response.bodyUsed) {
    const text = await response.text().catch(() => "");
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  const requestId = response.headers.get("x-request-id") ?? undefined;
  const problem: Problem = isProblem(parsed) ? parsed : {
    type: "about:blank",
    title: response.statusText || `HTTP ${response.status}`,
    status: response.status,
    ...(typeof parsed === "string" && parsed ? { detail: parsed.slice(0, 500) } : {}),
  };
  return new RunplaneError(problem, { status: response.status, requestId, runId: runIdFrom(requestId) });
}

/** `X-Request-Id` is the run id on run calls; anything else is not a run id. */
export function runIdFrom(requestId: string | null | undefined): string | undefined {
  return requestId && /^run_[0-9a-z]{26}$/.test(requestId) ? requestId : undefined;
}
