/**
 * What a `runplane` command is, shared by the dispatcher (`client/cli.ts`), the commands that talk to a
 * server (`client/_commands/`) and those that work on a data dir (`server/cli/`). It is a public module,
 * not a private `_` file, because both folders need the same `UsageError` class (the dispatcher prints
 * the command's help for it) and the same table entry; it imports nothing so that loading it costs
 * nothing.
 */

/** A command-line usage error: printed with the command's help, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** What every command gets: its arguments and where to write. */
export interface CommandIo {
  args: string[];
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  env: Record<string, string | undefined>;
  /** Where `--token -` and the like read from; `process.stdin` when absent. */
  stdin?: NodeJS.ReadableStream;
  /** Stops a command that runs until interrupted (`webhook listen`) as Ctrl-C does; for in-process use. */
  signal?: AbortSignal;
}

/** A subcommand: runs and resolves with the exit code. */
export type Command = (io: CommandIo) => Promise<number>;

/**
 * A row of the dispatcher's table. `summary` is inline and `help` and `load` import the command's module
 * only when called, so `runplane --help` and `runplane run` load no other command (and never the
 * server).
 */
export interface CommandEntry {
  summary: string;
  help: () => string | Promise<string>;
  load: () => Promise<Command>;
  /**
   * The token scopes the command's calls need, given its arguments (a subcommand may need another), so
   * that a refusal names every scope missing at once; absent for a command that calls no server.
   */
  scopes?: (args: string[]) => string[];
}
