import type { Handlers } from "../http/mod.ts";
import type { ServerContext } from "../context.ts";
import { ProblemError } from "../problems/mod.ts";

type SystemHandlers = Pick<Handlers, "getJwks" | "getHealth" | "getReadiness" | "getMetrics">;

/** JWKS, liveness, readiness and metrics: the operations that need no token. */
export function systemHandlers(context: ServerContext): SystemHandlers {
  return {
    getJwks() {
      return Promise.resolve({
        status: 200,
        contentType: "application/json",
        headers: { "Cache-Control": "public, max-age=300" },
        body: { keys: [context.key.publicJwk as { kty: "OKP"; crv: "Ed25519"; x: string; kid: string; alg: "EdDSA"; use: "sig" }] },
      });
    },
    getHealth() {
      return Promise.resolve({ status: 200, contentType: "application/json", body: { status: "ok" } });
    },
    async getReadiness() {
      const reasons = await context.readiness.reasons();
      if (reasons.length) {
        throw new ProblemError("service-unavailable", `Not ready: ${reasons.join("; ")}`, { headers: { "Retry-After": "1" } });
      }
      return { status: 200, contentType: "application/json", body: { status: "ready" } };
    },
    async getMetrics() {
      return { status: 200, contentType: "text/plain", headers: { "Content-Type": context.metrics.contentType }, body: await context.metrics.metrics() };
    },
  };
}
