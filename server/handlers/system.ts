import { createHash, timingSafeEqual } from "node:crypto";
import type { Handlers } from "../http/mod.ts";
import type { ServerContext } from "../context.ts";
import { sandboxReport } from "../placement/mod.ts";
import { ProblemError } from "../problems/mod.ts";

/** Compares two secrets in constant time (over their digests, so lengths do not leak either). */
function sameSecret(given: string, expected: string): boolean {
  const digest = (text: string) => createHash("sha256").update(text).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

type SystemHandlers = Pick<Handlers, "getJwks" | "getHealth" | "getReadiness" | "getMetrics">;

/** JWKS, liveness, readiness and metrics: the operations that need no token. */
/** The metrics' exposition; a 503 when a host's supervisor did not answer with its processes' sum. */
async function hostExposition(context: ServerContext): Promise<string> {
  try {
    return await context.metrics.exposition();
  } catch (error) {
    throw new ProblemError(
      "service-unavailable",
      `The host's metrics could not be gathered: ${(error as Error).message}`,
      {
        headers: { "Retry-After": "1" },
      },
    );
  }
}

export function systemHandlers(context: ServerContext): SystemHandlers {
  return {
    async getJwks() {
      return {
        status: 200,
        contentType: "application/json",
        headers: { "Cache-Control": "public, max-age=300" },
        body: { keys: await context.signingKeys.jwks() },
      };
    },
    getHealth() {
      return Promise.resolve({ status: 200, contentType: "application/json", body: { status: "ok" } });
    },
    async getReadiness() {
      const reasons = await context.readiness.reasons();
      if (reasons.length) {
        throw new ProblemError("service-unavailable", `Not ready: ${reasons.join("; ")}`, {
          headers: { "Retry-After": "1" },
        });
      }
      const { cgroups, gpus } = context;
      return {
        status: 200,
        contentType: "application/json",
        body: {
          status: "ready",
          sandbox: sandboxReport(context.sandbox),
          cgroups: { setting: cgroups.setting, version: cgroups.version, warnings: cgroups.problems },
          gpus: {
            source: gpus.source,
            count: gpus.gpus.length,
            held: context.runtime.hostCapacity().gpus.held,
            warnings: gpus.problems,
          },
          volumes: {
            mode: context.volumes.mode,
            unavailable: context.hostVolumes.unavailable().map((volume) => ({
              project_id: volume.projectId,
              volume: volume.volume,
              apps: volume.apps,
              reason: volume.reason,
            })),
          },
        },
      };
    },
    async getMetrics({ header }) {
      const expected = context.config.metricsToken;
      if (expected !== null && !sameSecret(header.authorization ?? "", `Bearer ${expected}`)) {
        throw new ProblemError(
          "unauthorized",
          "Send the metrics token as `Authorization: Bearer <RUNPLANE_METRICS_TOKEN>`",
          {
            headers: { "WWW-Authenticate": 'Bearer realm="runplane-metrics"' },
          },
        );
      }
      return {
        status: 200,
        contentType: "text/plain",
        headers: { "Content-Type": context.metrics.registry.contentType },
        body: await hostExposition(context),
      };
    },
  };
}
