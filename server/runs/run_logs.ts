/**
 * Run logs: each line a run's function writes, kept with the run. Lines are written in batches (one
 * transaction per `flushMs`, not one write per line) and bounded per run: past `limitBytes` the oldest
 * lines are deleted, so the tail is kept and a log whose first line is gone says `truncated`. Lines are
 * kept as long as results are (`RUNPLANE_RESULT_TTL` after they were written).
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { Database } from "../store/mod.ts";

/** One line as the API shows it. */
export interface RunLogLine {
  /** RFC 3339. */
  at: string;
  stream: "stdout" | "stderr";
  text: string;
}

/** A run's log as the API shows it. */
export interface RunLog {
  lines: RunLogLine[];
  /** The oldest lines were dropped for the per-run limit. */
  truncated: boolean;
}

/** A line the runtime reports. */
export interface OutputLineInput {
  runId: string;
  stream: "stdout" | "stderr";
  text: string;
  at: number;
}

/** Collects lines and writes them in batches. */
export interface RunLogWriter {
  add(line: OutputLineInput): void;
  /** Writes what is pending now. */
  flush(): Promise<void>;
  close(): Promise<void>;
}

/** The longest line kept (a minified blob printed by a function is cut). */
const MAX_LINE_CHARS = 16_000;
/** A run not written to for this long is forgotten by the writer (its lines stay in the store). */
const IDLE_MS = 10 * 60_000;

interface RunState {
  seq: number;
  bytes: number;
  /** Sizes of the lines kept, oldest first, with their seq: what to drop when over the limit. */
  kept: Array<[seq: number, bytes: number]>;
  dropThrough: number;
  lastAt: number;
}

/** Starts the writer. */
export function createRunLogWriter(
  db: Kysely<Database>,
  options: { limitBytes: number; logger: Logger; flushMs?: number },
): RunLogWriter {
  const flushMs = options.flushMs ?? 200;
  const runs = new Map<string, RunState>();
  let pending: Array<{ run_id: string; seq: number; at: number; stream: string; line: string }> = [];
  const drops = new Map<string, number>();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let writing: Promise<void> = Promise.resolve();

  async function write(): Promise<void> {
    timer = undefined;
    const rows = pending;
    pending = [];
    const cut = [...drops];
    drops.clear();
    if (rows.length === 0 && cut.length === 0) return;
    try {
      await db.transaction().execute(async (trx) => {
        // Rows already over the limit by the time they are written are not written at all.
        const kept = rows.filter((row) => row.seq > (runs.get(row.run_id)?.dropThrough ?? 0));
        for (let i = 0; i < kept.length; i += 500) {
          await trx.insertInto("run_logs").values(kept.slice(i, i + 500)).execute();
        }
        for (const [runId, through] of cut) {
          await trx.deleteFrom("run_logs").where("run_id", "=", runId).where("seq", "<=", through).execute();
        }
      });
    } catch (error) {
      options.logger.warn({ err: error, lines: rows.length }, "writing run logs failed; those lines are lost");
    }
    const now = Date.now();
    for (const [runId, state] of runs) if (now - state.lastAt > IDLE_MS) runs.delete(runId);
  }

  function schedule(): void {
    timer ??= setTimeout(() => {
      writing = writing.then(write);
    }, flushMs);
  }

  return {
    add(line) {
      const text = line.text.length > MAX_LINE_CHARS ? `${line.text.slice(0, MAX_LINE_CHARS)}…` : line.text;
      let state = runs.get(line.runId);
      if (!state) runs.set(line.runId, state = { seq: 0, bytes: 0, kept: [], dropThrough: 0, lastAt: line.at });
      const size = Buffer.byteLength(text) + 32;
      state.seq++;
      state.bytes += size;
      state.lastAt = line.at;
      state.kept.push([state.seq, size]);
      while (state.bytes > options.limitBytes && state.kept.length > 1) {
        const [seq, bytes] = state.kept.shift()!;
        state.bytes -= bytes;
        state.dropThrough = seq;
      }
      if (state.dropThrough > 0) drops.set(line.runId, state.dropThrough);
      pending.push({ run_id: line.runId, seq: state.seq, at: line.at, stream: line.stream, line: text });
      schedule();
    },
    async flush() {
      if (timer) {
        clearTimeout(timer);
        writing = writing.then(write);
      }
      await writing;
    },
    async close() {
      await this.flush();
    },
  };
}

/** The lines of `runId` after `afterSeq` (at most `limit`), and whether its head was cut. */
export async function readRunLog(
  db: Kysely<Database>,
  query: { runId: string; afterSeq?: number; limit?: number },
): Promise<{ lines: Array<RunLogLine & { seq: number }>; truncated: boolean }> {
  const rows = await db.selectFrom("run_logs").select(["seq", "at", "stream", "line"])
    .where("run_id", "=", query.runId).where("seq", ">", query.afterSeq ?? 0)
    .orderBy("seq").limit(query.limit ?? 100_000).execute();
  const first = query.afterSeq ? undefined : rows[0];
  return {
    lines: rows.map((r) => ({
      seq: Number(r.seq),
      at: new Date(Number(r.at)).toISOString(),
      stream: r.stream as RunLogLine["stream"],
      text: r.line,
    })),
    truncated: first !== undefined && Number(first.seq) > 1,
  };
}

/** Deletes the lines written at or before `before` (Unix ms); returns how many. */
export async function expireRunLogs(db: Kysely<Database>, options: { before: number }): Promise<number> {
  const result = await db.deleteFrom("run_logs").where("at", "<=", options.before).executeTakeFirst();
  return Number(result.numDeletedRows);
}

/** Deletes every line of `runIds` (their records are being deleted). */
export async function deleteRunLogsOf(db: Kysely<Database>, runIds: readonly string[]): Promise<void> {
  if (runIds.length) await db.deleteFrom("run_logs").where("run_id", "in", runIds).execute();
}
