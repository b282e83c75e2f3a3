/**
 * The route table as a radix tree (find-my-way, Fastify's router): a request's operation is found by
 * walking its path once, where @koa/router tried each of the table's path patterns in turn and composed
 * a middleware chain for every request (~3% of a sync call's CPU).
 */
import FindMyWay, { type HTTPMethod } from "find-my-way";
import type { RouteSpec } from "../../generated/routes.ts";

/** An operation found for a request, with its path parameters (percent-decoded). */
export interface RouteMatch<H> {
  route: RouteSpec;
  handle: H;
  params: Record<string, string>;
}

/** Finds each request's operation. */
export interface OperationRouter<H> {
  /** The operation at `method path` (a GET's also answers HEAD), or null. */
  find(method: string, path: string): RouteMatch<H> | null;
  /** The methods (HEAD left out) with an operation at `path`: a 405's `Allow`, empty for a 404. */
  allowedMethods(path: string): string[];
}

/** What follows the segments before `*` in `pattern`, of the raw `path` (empty for none). */
function restOfPath(path: string, pattern: string): string {
  const before = pattern.split("/").length - 1;
  const query = path.indexOf("?");
  return (query < 0 ? path : path.slice(0, query)).split("/").slice(before).join("/");
}

interface Stored<H> {
  route: RouteSpec;
  handle: H;
}

/**
 * Builds the router over `routes`, each with the handler `handlerOf` makes for it. Matching is as
 * @koa/router's was: case-insensitive in the fixed segments, a trailing slash ignored, and parameters of
 * any length (the contract's validators bound them).
 */
export function createOperationRouter<H>(
  routes: readonly RouteSpec[],
  handlerOf: (route: RouteSpec) => H,
): OperationRouter<H> {
  const tree = FindMyWay({ caseSensitive: false, ignoreTrailingSlash: true, maxParamLength: Infinity });
  const methods = [...new Set(routes.map((route) => route.method))];
  const noop = () => {};
  // A GET answers HEAD too, unless the contract declares a HEAD of its own there.
  const heads = new Set<string>(routes.filter((route) => route.method === "HEAD").map((route) => route.koaPath));
  for (const route of routes) {
    const stored: Stored<H> = { route, handle: handlerOf(route) };
    tree.on(route.method as HTTPMethod, route.koaPath, noop, stored);
    if (route.method === "GET" && !heads.has(route.koaPath)) tree.on("HEAD", route.koaPath, noop, stored);
  }
  return {
    find(method, path) {
      const found = tree.find(method as HTTPMethod, path);
      if (!found) return null;
      const { route, handle } = found.store as Stored<H>;
      const params = found.params as Record<string, string>;
      if (route.restOfPath !== null) {
        // The rest of the path as it was sent: the app gets it with its percent-encoding (a `%2F` stays one).
        delete params["*"];
        params[route.restOfPath] = restOfPath(path, route.koaPath);
      }
      return { route, handle, params };
    },
    allowedMethods(path) {
      return methods.filter((method) => method !== "HEAD" && tree.find(method as HTTPMethod, path) !== null);
    },
  };
}
