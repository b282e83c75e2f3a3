/**
 * The test suite's contract witness: finds the operation a response belongs to and checks the response
 * against its schemas. Every response a test receives goes through `assertMatchesContract`.
 */
import { routes, type RouteSpec } from "../../generated/routes.ts";
import { checkResponse } from "../../server/http/mod.ts";

// A parameter that takes the rest of the path (a custom runtime's route) spans segments, and may be empty.
const compiled = routes.map((route) => ({
  route,
  pattern: new RegExp(
    `^${route.path.replace(/\{([^}]+)\}/g, (_whole, name: string) => name === route.restOfPath ? ".*" : "[^/]+")}$`,
  ),
}));

/** The operation serving `method` and `pathname`, if any. */
export function findRoute(method: string, pathname: string): RouteSpec | undefined {
  const upper = method.toUpperCase();
  return compiled.find((c) => c.route.method === upper && c.pattern.test(pathname))?.route;
}

/**
 * Paths outside the public contract: the internal endpoint other hosts forward calls to
 * (docs/scaling.md). Its refusals are still problem documents, and its answers NDJSON frames.
 */
const INTERNAL = /^\/internal\//;

/**
 * Throws when `response` (for a request of `method` to `url`) does not match the contract. Reads a
 * clone of JSON and text bodies; streams are checked by status and headers only.
 */
export async function assertMatchesContract(method: string, url: string | URL, response: Response): Promise<void> {
  const { pathname } = new URL(url);
  const route = findRoute(method, pathname);
  if (!route) {
    if (response.status === 404 || response.status === 405) return assertProblemShape(response);
    if (INTERNAL.test(pathname)) return assertInternalShape(response);
    throw new Error(`No operation in the contract for ${method} ${pathname}`);
  }
  const contentType = response.headers.get("content-type")?.split(";")[0].trim() || undefined;
  let body: unknown;
  // A HEAD answer has no body, whatever its Content-Type says.
  if (
    contentType && contentType !== "text/event-stream" && response.status !== 304 && method.toUpperCase() !== "HEAD"
  ) {
    const text = await response.clone().text();
    body = contentType.endsWith("json") ? JSON.parse(text) : text;
  }
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    headers[name] = value;
  });
  const mismatches = checkResponse(route, { status: response.status, headers, contentType, body });
  if (mismatches.length) {
    throw new Error(
      `${method} ${pathname} → ${response.status} does not match the contract:\n  ${mismatches.join("\n  ")}`,
    );
  }
}

async function assertInternalShape(response: Response): Promise<void> {
  if (response.status !== 200) return assertProblemShape(response);
  const type = response.headers.get("content-type") ?? "";
  if (!type.startsWith("application/x-ndjson")) throw new Error(`An internal answer must be NDJSON, got ${type}`);
}

async function assertProblemShape(response: Response): Promise<void> {
  const type = response.headers.get("content-type") ?? "";
  if (!type.startsWith("application/problem+json")) {
    throw new Error(`A ${response.status} must be a problem document, got ${type}`);
  }
  const body = (await response.clone().json()) as Record<string, unknown>;
  if (typeof body.type !== "string" || typeof body.title !== "string" || body.status !== response.status) {
    throw new Error(`Not a problem document: ${JSON.stringify(body)}`);
  }
}

/** `fetch` that checks every response against the contract before returning it. */
export async function checkedFetch(url: string | URL, init: RequestInit = {}): Promise<Response> {
  const response = await fetch(url, init);
  await assertMatchesContract(init.method ?? "GET", url, response);
  return response;
}
