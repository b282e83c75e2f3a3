/**
 * One step of a build: a command run in its jail (the deployment's project, or a layer's builder), its
 * output line by line into the build log, killed with its process group past the step timeout or when the
 * build is stopped; and the lock that keeps two builds of one layer on a host from racing.
 */
import { mkdir, rm, stat } from "node:fs/promises";
import { createInterface } from "node:readline";
import { signalGroup } from "../runtime/mod.ts";
import type { JailSpec, Sandbox } from "../sandbox/mod.ts";
import type { BuildLogLine } from "./_build_log.ts";

/** A step of the build that failed; the message says which and why. */
export class BuildError extends Error {
  readonly step: string;
  constructor(step: string, message: string) {
    super(message);
    this.name = "BuildError";
    this.step = step;
  }
}

/** What every step of a build runs with. */
export interface StepOptions {
  /** The longest one step may run. */
  timeoutMs: number;
  log(line: BuildLogLine): void;
  signal?: AbortSignal;
  /** Jails every step: the deployment's project, and whether its commands reach public addresses. */
  sandbox: Sandbox;
  projectId: string;
  egress: boolean;
  /** The image of `[build] base_image`: every step runs with its root as `/` (writable: a layer's own copy). */
  image?: { root: string; writable?: boolean };
}

const LOCK_RETRY_MS = 250;

/** One command of a build step, and the jail it runs in. */
export interface StepCommand {
  file: string;
  args: string[];
  shown: string;
  /** The folders it reads and writes, its working directory, its environment (built from scratch). */
  jail: Omit<JailSpec, "projectId" | "egress">;
  /** Whether it reaches public addresses; the app's `[network] egress` when not said. */
  egress?: boolean;
}

/** Runs one command of `step` in its jail, its output into the log; throws a BuildError unless it exits 0. */
export async function runStep(step: string, command: StepCommand, options: StepOptions): Promise<void> {
  options.signal?.throwIfAborted();
  const image = options.image
    ? { image: { root: options.image.root, ...(options.image.writable ? { writable: true } : {}) } }
    : {};
  const child = options.sandbox.spawn(command.file, command.args, {
    jail: { ...command.jail, ...image, projectId: options.projectId, egress: command.egress ?? options.egress },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const last = new LastLines();
  for (const stream of ["stdout", "stderr"] as const) {
    createInterface({ input: child[stream]!, crlfDelay: Infinity })
      .on("line", (text) => {
        last.add(text);
        options.log({ stream, text });
      });
  }
  let stopped: "timeout" | "aborted" | undefined;
  const stop = (why: "timeout" | "aborted") => {
    stopped ??= why;
    signalGroup(child, "SIGKILL");
  };
  const timer = setTimeout(() => stop("timeout"), options.timeoutMs);
  const onAbort = () => stop("aborted");
  options.signal?.addEventListener("abort", onAbort);
  const outcome = await new Promise<{ code: number | null; error?: Error }>((resolve) => {
    child.once("error", (error) => resolve({ code: null, error }));
    child.once("close", (code) => resolve({ code }));
  }).finally(() => {
    clearTimeout(timer);
    options.signal?.removeEventListener("abort", onAbort);
  });
  if (stopped === "timeout") {
    throw new BuildError(
      step,
      `${step} failed: \`${command.shown}\` ran past the build timeout of ${
        options.timeoutMs / 1000
      } s (RUNPLANE_BUILD_TIMEOUT)`,
    );
  }
  if (stopped === "aborted") throw new BuildError(step, `${step} stopped: the build was cancelled`);
  if (outcome.error) {
    throw new BuildError(step, `${step} failed: \`${command.shown}\` did not start (${outcome.error.message})`);
  }
  if (outcome.code !== 0) {
    throw new BuildError(step, `${step} failed: \`${command.shown}\` exited with code ${outcome.code}${last.said()}`);
  }
}

/** The last lines a step printed, for its error: what a failed apt or pip said, without reading the whole log. */
class LastLines {
  static readonly LINES = 3;
  static readonly CHARS = 240;
  readonly #lines: string[] = [];

  add(text: string): void {
    const line = text.trim();
    if (!line) return;
    this.#lines.push(line.length > LastLines.CHARS ? `${line.slice(0, LastLines.CHARS)}…` : line);
    if (this.#lines.length > LastLines.LINES) this.#lines.shift();
  }

  /** ` (last output: "…" | "…")`, or nothing when it printed nothing. */
  said(): string {
    if (this.#lines.length === 0) return "";
    return ` (last output: ${this.#lines.map((line) => JSON.stringify(line)).join(" | ")})`;
  }
}

/** Holds the digest's lock while `work` runs: two builds of one digest on a host never race. */
export async function withLock<T>(lock: string, options: StepOptions, work: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      await mkdir(lock);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const age = await stat(lock).then((s) => Date.now() - s.mtimeMs, () => 0);
      // A lock older than a whole step's timeout belongs to a process that died while building.
      if (age > options.timeoutMs + 60_000) await rm(lock, { recursive: true, force: true });
      else await new Promise((resolve) => setTimeout(resolve, LOCK_RETRY_MS));
      options.signal?.throwIfAborted();
    }
  }
  try {
    return await work();
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}
