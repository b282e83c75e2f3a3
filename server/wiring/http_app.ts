/** The HTTP app over the server's context: the handlers, token checks, the dashboard, forwarded calls, timings. */
import type { RequestListener } from "node:http";
import { join } from "node:path";
import { createSessionRecords, createTokenVerifier, type SigningKeys } from "../auth/mod.ts";
import type { ServerContext } from "../context.ts";
import { createHandlers } from "../handlers/mod.ts";
import { createHttpApp, type DrainGate } from "../http/mod.ts";
import type { Executors } from "../placement/mod.ts";
import type { StoreOutage } from "../store/mod.ts";

/** Options of `createServerApp`. */
export interface ServerAppOptions {
  signingKeys: SigningKeys;
  gate: DrainGate;
  outage: StoreOutage;
  /** From `placeExecutors`: calls other hosts forward here run on `forwarded`. */
  executors: Executors;
}

/** Makes the Koa app that answers the port (a worker's, or a lone server's). */
export function createServerApp(context: ServerContext, options: ServerAppOptions): { callback(): RequestListener } {
  const { config, store, logger, metrics } = context;
  return createHttpApp({
    handlers: createHandlers(context),
    verifier: createTokenVerifier({ db: store.db, keys: options.signingKeys }),
    logger,
    bodyLimitBytes: config.bodyLimitBytes,
    bundleLimitBytes: config.bundleLimitBytes,
    spoolDir: join(config.dataDir, "uploads"),
    responseCheck: config.responseCheck,
    dashboard: { secrets: context.secrets, records: createSessionRecords(store.db) },
    gate: options.gate,
    storeOutage: options.outage,
    forwardedCalls: context.forwardKey
      ? { key: context.forwardKey, executor: options.executors.forwarded, now: store.clock.now }
      : undefined,
    onRequestFinished(request) {
      metrics.httpRequestDuration.observe(
        { operation_id: request.operationId ?? "unmatched", method: request.method, status: String(request.status) },
        request.durationMs / 1000,
      );
    },
  });
}
