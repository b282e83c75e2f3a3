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
}

/** A subcommand: runs and resolves with the exit code. */
export type Command = (io: CommandIo) => Promise<number>;
