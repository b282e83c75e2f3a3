/**
 * The dispatcher's last word on a command that throws something other than an Error with a string code:
 * a DOMException (an aborted fetch: its `code` is the number 20) or a thrown value that is no object.
 * Each is reported on stderr with exit code 1, never a TypeError of the dispatcher's own.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type CliIo, dispatch } from "../../client/cli.ts";
import type { CommandEntry } from "../../client/cli_command.ts";

/** A commands table of one command, `boom`, that throws `thrown`. */
function throwing(thrown: unknown): Record<string, CommandEntry> {
  return {
    boom: {
      summary: "Throws",
      help: async () => "Usage: runplane boom",
      load: async () => async () => {
        throw thrown;
      },
    },
  };
}

/** An io that keeps what was written. */
function capture(): CliIo & { out: string[]; err: string[] } {
  const out: string[] = [];
  const err: string[] = [];
  return {
    out,
    err,
    stdout: { write: (text: string) => out.push(text) } as unknown as NodeJS.WritableStream,
    stderr: { write: (text: string) => err.push(text) } as unknown as NodeJS.WritableStream,
    env: {},
  } as CliIo & { out: string[]; err: string[] };
}

describe("the CLI's dispatcher and what a command throws", () => {
  for (
    const [name, thrown] of [
      ["an AbortError (a DOMException, numeric code)", new DOMException("This operation was aborted", "AbortError")],
      ["an Error whose code is a number", Object.assign(new Error("refused"), { code: 111 })],
      ["undefined", undefined],
      ["a string", "text thrown"],
    ] as const
  ) {
    it(`reports ${name} with exit code 1`, async () => {
      const io = capture();
      const code = await dispatch(["boom"], { commands: throwing(thrown), io });
      assert.equal(code, 1);
      const stderr = io.err.join("");
      assert.match(stderr, /^runplane boom: /);
      assert.doesNotMatch(stderr, /TypeError|startsWith/);
    });
  }
});
