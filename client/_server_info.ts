/** What the REST API says about the server itself: its token-verifying keys, liveness, readiness, metrics. */
import type { components } from "../generated/api.d.ts";
import { type ClientContext, unwrap } from "./_client_context.ts";
import type { JsonWebKeySet } from "./types.ts";

/** The server-information calls of a client; none needs a token. */
export class ServerInfo {
  readonly #client: ClientContext;

  /** Calls over `client`'s REST API. */
  constructor(client: ClientContext) {
    this.#client = client;
  }

  /** The public keys that verify service-account tokens. */
  jwks(): Promise<JsonWebKeySet> {
    return unwrap(this.#client.api.GET("/.well-known/jwks.json"));
  }

  /** Liveness. */
  health(): Promise<{ status: "ok" }> {
    return unwrap(this.#client.api.GET("/healthz"));
  }

  /** Readiness; a server that is not ready rejects with its 503 `RunplaneError`. */
  readiness(): Promise<components["schemas"]["Readiness"]> {
    // A 503 is readiness's answer (not ready), not a failure to retry past.
    return unwrap(this.#client.api.GET("/readyz", { fetch: this.#client.send }));
  }

  /** The Prometheus metrics text. */
  metrics(): Promise<string> {
    return unwrap(this.#client.api.GET("/metrics", { parseAs: "text" }));
  }
}
