import { parseArgs } from "node:util";
import type { RunOptions } from "../mod.ts";
import { appTarget, CONNECTION_HELP, CONNECTION_OPTIONS, connect } from "./connection.ts";
import { readInput } from "./run_input.ts";
import { waitAndReport } from "./run_wait.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { jsonText, writeJson } from "./output.ts";
import { type CommandIo, UsageError } from "../cli_command.ts";

/** Help of `runplane run`. */
export const RUN_HELP = `Usage: runplane run <project>/<app>[/<function>] | <app> [--data JSON | --data @file.json]
                    [--async [--wait]] [--stream] [--webhook URL [--webhook-secret S]] [--idempotency-key K]

Calls a function (default: run) with the JSON object's members as its arguments and prints the result.
  --stream   print each item as it arrives (text as is, other values as JSON)
  --async    queue the run and print its id (with --json, its idempotency key too); with --wait, poll
             until it ends and print the outcome (progress on a terminal)
  --idempotency-key K  the same key and body within 24 h answer with the first call's run. --async
             sends a fresh random key when none is given and retries once, with the key, after a broken
             connection or a 503; a sync or --stream call is retried only when given a key
Exit code 1 when the call or the run failed.

${CONNECTION_HELP}`;

/** `runplane run`: calls a function synchronously, asynchronously or as a stream. */
export async function runCommand(io: CommandIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args: io.args,
    allowPositionals: true,
    options: {
      ...CONNECTION_OPTIONS,
      data: { type: "string" },
      async: { type: "boolean", default: false },
      wait: { type: "boolean", default: false },
      stream: { type: "boolean", default: false },
      webhook: { type: "string" },
      "webhook-secret": { type: "string" },
      "idempotency-key": { type: "string" },
    },
  });
  const written = positionals[0];
  if (!written || positionals.length > 1 || !/^[^/]+(\/[^/]+){0,2}$/.test(written)) {
    throw new UsageError("run needs one <project>/<app>[/<function>] (or <app> alone: an app of the token's project)");
  }
  // `<app>` alone is an app of the token's project (two parts stay <project>/<app>).
  const target = written.includes("/")
    ? written
    : appTarget(written, { flags: values, env: io.env, usage: "run needs one <project>/<app>[/<function>]" });
  if (values.stream && values.async) {
    throw new UsageError("--stream and --async do not go together: a stream answers as the run goes");
  }
  if (values.wait && !values.async) throw new UsageError("--wait waits for an --async run: add --async");
  if (values["webhook-secret"] && !values.webhook) {
    throw new UsageError("--webhook-secret signs webhook deliveries: add --webhook URL");
  }
  const input = await readInput(values.data);
  const client = connect(values, io.env);
  const controller = new AbortController();
  const interrupt = () => controller.abort(new Error("Interrupted"));
  process.once("SIGINT", interrupt);
  // An async run always carries a key (chosen here, so that a failure can name it); a sync or stream
  // call only the one given, since a key makes the server record the call before it starts.
  const idempotencyKey = values["idempotency-key"] ?? (values.async ? crypto.randomUUID() : undefined);
  const options: RunOptions = {
    webhookEndpoint: values.webhook,
    webhookSecret: values["webhook-secret"],
    idempotencyKey,
    signal: controller.signal,
  };
  try {
    if (values.stream) {
      for await (const item of client.stream(target, input, options)) {
        io.stdout.write(`${typeof item === "string" && !values.json ? stripTerminalControls(item) : jsonText(item)}\n`);
      }
      return 0;
    }
    if (!values.async) {
      const answer = await client.run(target, input, options);
      if (values.json) writeJson(io, answer);
      else io.stdout.write(`${jsonText(answer.result, 2)}\n`);
      return 0;
    }
    const runId = await client.runAsync(target, input, options);
    if (!values.wait) {
      if (values.json) writeJson(io, { run_id: runId, idempotency_key: idempotencyKey });
      else io.stdout.write(`${runId}\n`);
      return 0;
    }
    return await waitAndReport(io, client, { app: target, runId, json: values.json, signal: controller.signal });
  } finally {
    process.removeListener("SIGINT", interrupt);
  }
}
