/**
 * The run service's background work: the dispatcher of queued async runs (when it has an executor and
 * dispatches), upkeep (expired leases, dead owners, expired results), retention, and the wake-ups it
 * listens to (runs queued elsewhere, cancels asked of this process).
 */
import type { Ticker } from "../ticker/mod.ts";
import { startDispatcher } from "./_dispatcher.ts";
import type { LocalRuns } from "./_local_runs.ts";
import { startMaintenance } from "./_maintenance.ts";
import { DEFAULT_RETENTION_MS, startRetention } from "./_retention.ts";
import type { RunEvents } from "./_run_events.ts";
import type { RunServiceOptions } from "./_service_types.ts";

/** What `startRunLoops` needs besides the service's options. */
export interface RunLoopsOptions {
  /** This process's lease owner id. */
  owner: string;
  /** The runs executing in this process. */
  local: LocalRuns;
  events: RunEvents;
  /** The largest result stored, in JSON bytes. */
  resultLimitBytes: number;
  /** The store's clock. */
  clock: () => number;
  /** Called when deliveries were added to the outbox. */
  onDeliveries(): void;
}

/** The service's running loops and listeners. */
export interface RunLoops {
  /** The dispatcher, when this process dispatches queued async runs. */
  readonly dispatcher: Ticker | undefined;
  /** Stops listening to wake-ups and stops every loop. */
  stop(): Promise<void>;
}

/** Starts the dispatcher (with an executor that dispatches), upkeep and retention, and listens to wake-ups. */
export function startRunLoops(options: RunServiceOptions, wiring: RunLoopsOptions): RunLoops {
  const { db, logger, config, notifier } = options;
  const { owner, local, events, resultLimitBytes, clock, onDeliveries } = wiring;
  const loops: Ticker[] = [];
  let dispatcher: Ticker | undefined;
  if (options.executor && options.dispatch !== false) {
    dispatcher = startDispatcher({
      db,
      executor: options.executor,
      logger,
      owner,
      leaseMs: config.runLeaseMs,
      local,
      events,
      resultLimitBytes,
      pollMs: options.pollMs ?? 250,
      onFinished() {
        onDeliveries();
        dispatcher?.wake();
      },
      now: clock,
    });
    loops.push(dispatcher);
  }
  loops.push(
    startMaintenance({
      db,
      logger,
      events,
      owner,
      ownersDir: options.ownersDir,
      leaseMs: config.runLeaseMs,
      resultTtlMs: config.resultTtlMs,
      local,
      onDeliveries,
      now: clock,
    }),
  );
  loops.push(startRetention({
    db,
    logger,
    retentionMs: config.runRetentionMs ?? DEFAULT_RETENTION_MS,
    resultTtlMs: config.resultTtlMs,
    now: clock,
  }));
  const unlisten: Array<() => void> = [];
  if (notifier) {
    // Another process queued a run: claim it now if there is room, rather than at the next poll.
    // A wake-up names the process that queued the runs; that one woke its own dispatcher already
    // (`accepted`), and a wake-up per accepted batch would cost it a queue scan per batch.
    if (dispatcher) {
      unlisten.push(notifier.listen("runplane_runs", (from) => {
        if (from !== owner) dispatcher?.wake();
      }));
    }
    // Another process was asked to cancel a run this one runs. A lost wake-up is caught by the next
    // lease renewal, which reads `cancel_requested`.
    unlisten.push(notifier.listen("runplane_cancel", (runId) => {
      if (runId) local.get(runId)?.cancel();
    }));
  }
  return {
    dispatcher,
    async stop() {
      for (const stopListening of unlisten) stopListening();
      await Promise.all(loops.map((loop) => loop.stop()));
    },
  };
}
