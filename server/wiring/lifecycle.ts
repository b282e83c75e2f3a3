/**
 * How a server stops: `close()` (stops listening, then every part in the order that lets each finish) and
 * `drain()` (new calls get 503, what is in flight may finish within a timeout, then `close()`). It starts
 * the apps' sampler (their charts' replicas), which a close stops before the store.
 */
import type { DeliveryWorker } from "../webhooks/mod.ts";
import type { Deployments } from "../deployments/mod.ts";
import type { DrainGate } from "../http/mod.ts";
import type { Logger } from "../log.ts";
import type { ClusterHost } from "../placement/mod.ts";
import type { ReplicaEnvironments } from "../project_secrets/mod.ts";
import type { RunChangeFeed, RunLogWriter, RunService } from "../runs/mod.ts";
import type { Runtime } from "../runtime/mod.ts";
import type { Cgroups, Sandbox } from "../sandbox/mod.ts";
import type { Store, StoreOutage } from "../store/mod.ts";
import { sampleApps } from "./app_samples.ts";
import type { ServerListener } from "./listener.ts";

/** What `createLifecycle` stops, in its order. */
export interface LifecycleParts {
  logger: Logger;
  gate: DrainGate;
  listener: ServerListener;
  /** The apps' loading: a close waits for it. */
  loading: Promise<void>;
  runs: RunService;
  runChanges: RunChangeFeed;
  deployments: Deployments;
  replicaEnvironments: ReplicaEnvironments;
  cluster?: ClusterHost;
  runtime: Runtime;
  cgroups: Cgroups;
  runLogs: RunLogWriter;
  deliveries?: DeliveryWorker;
  store: Store;
  sandbox: Sandbox;
  outage: StoreOutage;
  /** WebSocket runs: closed with 1001 when a drain's timeout ends, and before a close stops the replicas. */
  websockets?: { goingAway(): Promise<void> };
}

/** A server's stops (see `RunplaneServer.close` and `drain`). */
export interface Lifecycle {
  close(): Promise<void>;
  drain(timeoutMs: number): Promise<void>;
}

/** Makes `close()` (once; later calls share it) and `drain()` over the server's parts. */
export function createLifecycle(parts: LifecycleParts): Lifecycle {
  const { logger, gate, listener, runs, cluster } = parts;
  // The apps' charts: this process's replicas sampled into the store (a worker runs none: it writes none).
  const appSampler = sampleApps(parts);
  let closing: Promise<void> | undefined;

  function close(): Promise<void> {
    closing ??= (async () => {
      await parts.loading;
      await parts.websockets?.goingAway();
      const connectionsEnded = listener.stopListening();
      listener.closeIdleConnections();
      // Stopping the dispatcher first keeps it from starting runs on replicas that are going away;
      // stopping the replicas ends the calls (and streams) still open, so the connections can finish.
      await runs.stop();
      // Ends the pages' event streams, so their connections can close.
      await parts.runChanges.close();
      await parts.deployments.stop();
      parts.replicaEnvironments.close();
      // Its seats go first, so no host forwards a call to replicas that are going away.
      await cluster?.stop();
      await parts.runtime.close();
      await parts.cgroups.close();
      await parts.runLogs.close();
      // A call answered after the first sweep (a drain cut short answers its calls 409) leaves its kept-alive
      // connection idle: sweep again until every connection ended, or one would hold the process for the
      // keep-alive timeout (65 s).
      const sweep = setInterval(() => listener.closeIdleConnections(), 100);
      await connectionsEnded.finally(() => clearInterval(sweep));
      await parts.deliveries?.stop();
      await appSampler.stop();
      await parts.store.close();
      parts.sandbox.close();
      parts.outage.close();
    })();
    return closing;
  }

  let draining: Promise<void> | undefined;
  let cutDrainShort = () => {};

  function drain(timeoutMs: number): Promise<void> {
    if (draining) {
      cutDrainShort();
      return draining;
    }
    const cutShort = new Promise<void>((resolve) => (cutDrainShort = resolve));
    draining = drainFor(timeoutMs, cutShort);
    return draining;
  }

  async function drainFor(timeoutMs: number, cutShort: Promise<void>): Promise<void> {
    gate.close();
    logger.info({ timeout_ms: timeoutMs }, "draining: new calls get 503; in-flight calls, streams and runs may finish");
    // The listener stays open while draining: a call that still arrives gets a 503 problem with
    // Retry-After and `Connection: close`, and probes see /readyz fail, instead of a refused connection
    // that a load balancer might retry blindly.
    await runs.stopDispatching();
    // Its seats go at once: the other hosts stop sending it calls and may start the replicas it held,
    // while the calls in flight here finish on its own.
    await cluster?.stop();
    let wasCutShort = false;
    await Promise.race([
      Promise.all([gate.idle(timeoutMs), runs.settled(timeoutMs)]),
      cutShort.then(() => (wasCutShort = true)),
    ]);
    const [requests, running] = [gate.active, await runs.settled(0)];
    if (requests > 0 || running > 0) {
      // A WebSocket is told the server is going away (1001) and its run ends before what is left is abandoned.
      await parts.websockets?.goingAway();
      const interrupted = await runs.abandon();
      logger.warn(
        { requests, runs: running, interrupted },
        `${wasCutShort ? "drain cut short" : "drain timeout reached"}; stopping what still runs`,
      );
    }
    await close();
    logger.info("drained");
  }

  return { close, drain };
}
