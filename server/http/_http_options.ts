/** The HTTP layer's options and what it reports of a finished request (re-exported by mod.ts). */
import type { SessionRecords, TokenVerifier } from "../auth/mod.ts";
import type { Logger } from "../log.ts";
import type { SecretBox } from "../secrets/mod.ts";
import type { DrainGate } from "./drain_gate.ts";
import type { ForwardedCallsOptions } from "./forwarded_calls.ts";
import type { Handlers } from "./handler_types.ts";

/** What the HTTP layer needs. */
export interface HttpAppOptions {
  handlers: Handlers;
  verifier: TokenVerifier;
  logger: Logger;
  bodyLimitBytes: number;
  /** The largest body of a media type other than JSON (a deploy bundle). */
  bundleLimitBytes: number;
  /** Where such a body is spooled while its request is handled (removed after, whatever the outcome). */
  spoolDir: string;
  /** Check every response against the contract (development and tests). */
  responseCheck: boolean;
  /** Counts requests in flight and turns new calls away while the server drains. */
  gate?: DrainGate;
  /** Called once per request when its response has been sent (metrics). */
  onRequestFinished?(request: FinishedRequest): void;
  /**
   * The dashboard's sessions: `secrets` seals their cookies, `records` holds them from sign-in to
   * sign-out. Without it there is no dashboard and no cookie is read.
   */
  dashboard?: { secrets: SecretBox; records: SessionRecords };
  /**
   * The store's outage record: an error it recognises as the store being away (logged once per outage)
   * becomes a 503 `store-unavailable` with `Retry-After`, not a logged 500; every 503
   * `store-unavailable` answered, whatever raised it, is counted there (`answered`), in this one place.
   */
  storeOutage?: { refused(error: unknown): boolean; answered(): void };
  /**
   * The internal endpoint other hosts forward calls to (`POST /internal/v1/calls/…`, outside the public
   * contract); absent, it is not mounted.
   */
  forwardedCalls?: Omit<ForwardedCallsOptions, "bodyLimitBytes">;
}

/** What is known of a request once its response has been sent. */
export interface FinishedRequest {
  operationId: string | null;
  method: string;
  status: number;
  durationMs: number;
}
