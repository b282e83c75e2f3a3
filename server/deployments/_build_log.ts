/**
 * A build's log, written to the store as the build runs so that any process can show or follow it:
 * lines are batched (one insert per 100 ms or per 200 lines) and bounded — past `limitBytes` lines are
 * counted, not stored, except the last few, which are written at the end with how many were left out.
 */
import type { Kysely } from "kysely";
import type { Database } from "../store/mod.ts";
import { insertLogLines, type LogLine } from "./_records.ts";

/** One line of build output. */
export interface BuildLogLine {
  stream: "stdout" | "stderr" | "build";
  text: string;
}

/** A build log being written. */
export interface BuildLog {
  write(line: BuildLogLine): void;
  /** The last lines written (for a failure's summary). */
  tail(): string[];
  /** Writes what is pending, and the omitted-lines note; call once at the end. */
  close(): Promise<void>;
}

/** Options of `createBuildLog`. */
export interface BuildLogOptions {
  now(): number;
  /** Bytes of lines stored before the rest is left out (default 1 MiB). */
  limitBytes?: number;
  /** A failed insert (the build goes on; its log has a gap). */
  onError(error: unknown): void;
}

const FLUSH_MS = 100;
const BATCH_LINES = 200;
const TAIL_LINES = 50;
/** The longest line kept; a longer one is cut (a minified file printed by a build step). */
const MAX_LINE_CHARS = 4000;

/** Starts the log of build `deploymentId`. */
export function createBuildLog(db: Kysely<Database>, deploymentId: string, options: BuildLogOptions): BuildLog {
  const limitBytes = options.limitBytes ?? 1024 * 1024;
  let seq = 0;
  let storedBytes = 0;
  let omitted = 0;
  let pending: LogLine[] = [];
  const recent: BuildLogLine[] = [];
  let writing: Promise<void> = Promise.resolve();
  let timer: ReturnType<typeof setTimeout> | undefined;

  function flush(): Promise<void> {
    clearTimeout(timer);
    timer = undefined;
    const batch = pending;
    pending = [];
    writing = writing.then(() => insertLogLines(db, deploymentId, batch)).catch(options.onError);
    return writing;
  }

  function push(line: BuildLogLine): void {
    pending.push({ seq: ++seq, at: options.now(), stream: line.stream, line: line.text });
    if (pending.length >= BATCH_LINES) void flush();
    else timer ??= setTimeout(() => void flush(), FLUSH_MS);
  }

  return {
    write(line) {
      const text = line.text.length > MAX_LINE_CHARS ? `${line.text.slice(0, MAX_LINE_CHARS)}…` : line.text;
      const entry = { stream: line.stream, text };
      recent.push(entry);
      if (recent.length > TAIL_LINES) recent.shift();
      if (omitted === 0 && storedBytes + text.length <= limitBytes) {
        storedBytes += text.length + 1;
        push(entry);
      } else {
        omitted++;
      }
    },
    tail() {
      return recent.map((l) => l.text);
    },
    async close() {
      if (omitted > 0) {
        const shown = recent.slice(-Math.min(omitted, TAIL_LINES));
        push({
          stream: "build",
          text: `==> ${omitted - shown.length} lines left out (the log's limit); the last ones:`,
        });
        for (const line of shown) push(line);
      }
      await flush();
    },
  };
}
