/**
 * The run service's way out: dispatching stopped (draining), waiting for the runs executing here, the
 * runs still here ended `interrupted` past the drain timeout (each once, with its webhook queued), and
 * the loops and the write-behind stopped.
 */
import { INTERRUPTED, type LocalRuns } from "./_local_runs.ts";
import { LiveRunRecord } from "./_live_run.ts";
import { selectRunsOf } from "./_queries.ts";
import { endStoredRun, runEnd } from "./_run_end.ts";
import type { RunEvents } from "./_run_events.ts";
import type { RunLoops } from "./_run_loops.ts";
import type { RunServiceOptions } from "./_service_types.ts";
import type { RunRow } from "./_view.ts";
import type { WriteBehind } from "./_write_behind.ts";

/** What `RunShutdown` needs besides the service's options. */
export interface RunShutdownOptions {
  /** This process's lease owner id. */
  owner: string;
  /** The runs executing in this process. */
  local: LocalRuns;
  events: RunEvents;
  writer: WriteBehind;
  loops: RunLoops;
  /** The store's clock. */
  clock: () => number;
  /** Called when deliveries were added to the outbox. */
  onDeliveries(): void;
}

/** The fields a run is logged with when its process gives it up. */
function toLogFields(row: RunRow): { run_id: string; app: string } {
  return { run_id: row.run_id, app: `${row.project_id}/${row.app_id}` };
}

/** Drains, abandons and stops the service's runs and work. */
export class RunShutdown {
  readonly #options: RunServiceOptions;
  readonly #wiring: RunShutdownOptions;

  constructor(options: RunServiceOptions, wiring: RunShutdownOptions) {
    this.#options = options;
    this.#wiring = wiring;
  }

  /** Stops claiming queued runs (see `RunService.stopDispatching`). */
  async stopDispatching(): Promise<void> {
    await this.#wiring.loops.dispatcher?.stop();
  }

  /** Waits for the runs executing here (see `RunService.settled`). */
  async settled(timeoutMs: number): Promise<number> {
    const { local } = this.#wiring;
    const deadline = Date.now() + timeoutMs;
    while (local.size > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    return local.size;
  }

  /** Ends every run this process still runs as `failure`/`interrupted` (see `RunService.abandon`). */
  async abandon(): Promise<number> {
    const { db, logger } = this.#options;
    const { owner, local, events, writer, clock, onDeliveries } = this.#wiring;
    // A live run ends through its own record (its secret, its caller's log line, one end told); then
    // the runs only the store knows as this process's (async runs, live ones already gone) end there.
    const live = [...local.values()].filter((run): run is LiveRunRecord => run instanceof LiveRunRecord && !run.ended);
    // A refused record is kept and retried by the writer, which logs it: nobody answers here.
    const liveEnds = live.map((run) => run.interrupt().catch(() => {}));
    await writer.flush();
    await Promise.all(liveEnds);
    const rows = await selectRunsOf(db, owner);
    let ended = live.length;
    const now = clock();
    for (const row of rows) {
      const end = runEnd(row, { status: "failure", error: INTERRUPTED }, { now });
      const reported = await endStoredRun({ db, events }, end, { from: ["running"], owner });
      if (reported) ended++;
    }
    const interrupted = [...live.map((run) => run.logFields()), ...rows.map((row) => toLogFields(row))];
    for (const fields of interrupted) logger.warn(fields, "run interrupted: the server stopped before it finished");
    if (ended) onDeliveries();
    return ended;
  }

  /** Stops the loops and listeners, then writes buffered records (see `RunService.stop`). */
  async stop(): Promise<void> {
    const { loops, writer } = this.#wiring;
    await loops.stop();
    await writer.close();
  }
}
