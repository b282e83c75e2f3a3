/** The server's logger: pino JSON lines, with every path that could carry a secret redacted. */
import { pino, type Logger } from "pino";
import pretty from "pino-pretty";

export type { Logger } from "pino";

/** Paths whose values never reach a log line, whatever a caller logs. */
export const REDACTED_PATHS = [
  "token",
  "secret",
  "webhookSecret",
  "authorization",
  "masterKey",
  "*.token",
  "*.secret",
  "*.webhookSecret",
  "*.masterKey",
  "*.authorization",
  "*.Authorization",
  'headers["x-webhook-secret"]',
  "*.headers.authorization",
  '*.headers["x-webhook-secret"]',
];

/** Options of `createLogger`. */
export interface LoggerOptions {
  level?: string;
  /** Where lines go (default stdout). */
  destination?: NodeJS.WritableStream;
}

/** Creates the root logger: JSON lines, or pretty lines when it writes to a terminal. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const destination = options.destination
    ?? (process.stdout.isTTY
      ? pretty({ colorize: true, translateTime: "SYS:HH:MM:ss.l", ignore: "pid,hostname,service" })
      : process.stdout);
  return pino(
    {
      level: options.level ?? "info",
      base: { service: "runplane" },
      redact: { paths: REDACTED_PATHS, censor: "[redacted]" },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  );
}
