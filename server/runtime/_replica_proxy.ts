/** How a replica that is an HTTP server (a custom runtime, an external url) runs a call: it forwards it. */
import type { Dispatcher } from "undici";
import type { GuardOptions } from "../webhooks/mod.ts";
import type { CallOutcome } from "./_outcome.ts";
import { proxyCall } from "./_proxy.ts";
import { proxyHttpCall } from "./_proxy_http.ts";
import type { ReplicaCall } from "./_replica.ts";

/** Where a replica that forwards its calls over HTTP sends them (see `ProxyCall`'s fields of the same names). */
export interface ProxyTarget {
  /** The base URL, without a trailing slash. */
  baseUrl: string;
  dispatcher?: Dispatcher;
  guard?: GuardOptions;
  oomLimit?(): number | undefined;
}

/**
 * Runs a replica's call by forwarding it to `target` (`proxyCall`, or `proxyHttpCall` for a call by
 * another method): the function name is the path.
 */
export function proxyReplicaCall(call: ReplicaCall, target: ProxyTarget): Promise<CallOutcome> {
  return (call.http ? proxyHttpCall : proxyCall)(target.baseUrl, {
    runId: call.runId,
    path: call.functionName,
    input: call.kwargs,
    inputJson: call.kwargsJson,
    graceMs: call.graceMs,
    signal: call.signal,
    onSettled: call.onSettled,
    dispatcher: target.dispatcher,
    guard: target.guard,
    oomLimit: target.oomLimit,
    http: call.http,
  });
}
