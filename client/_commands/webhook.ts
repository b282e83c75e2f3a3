import { readFile } from "node:fs/promises";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { parseArgs } from "node:util";
import { verifyWebhook, type WebhookVerification } from "../webhook_verifier.ts";
import { type CommandIo, UsageError } from "../cli_command.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { jsonText } from "./output.ts";

/** Help of `runplane webhook`. */
export const WEBHOOK_HELP = `Usage:
  runplane webhook verify --secret S --body <file> (--header "Name: value")... [--headers <file>]
                          [--tolerance SECONDS] [--vendor WORD] [--json]
  runplane webhook listen --port N [--host 127.0.0.1] [--secret S] [--tolerance SECONDS] [--vendor WORD] [--json]

verify checks one delivery's signature (X-Request-Id, X-Runplane-Webhook-Timestamp and
X-Runplane-Webhook-Signature over the body file's exact bytes); exit 0 when valid, 1 when not.
--headers reads "Name: value" lines or a JSON object.

listen runs a local receiver (--port 0 picks a free port) that prints each delivery and whether its
signature is valid; it answers 401 to a delivery whose signature is invalid, 200 otherwise. Stop it
with Ctrl-C. The vendor word (default Runplane) must match the server's RUNPLANE_WEBHOOK_HEADER_VENDOR.`;

const OPTIONS = {
  secret: { type: "string" },
  body: { type: "string" },
  header: { type: "string", multiple: true },
  headers: { type: "string" },
  tolerance: { type: "string" },
  vendor: { type: "string" },
  port: { type: "string" },
  host: { type: "string", default: "127.0.0.1" },
  json: { type: "boolean", default: false },
} as const;

function parseHeaderLines(lines: string[], into: Record<string, string>): void {
  for (const line of lines) {
    if (!line.trim()) continue;
    const colon = line.indexOf(":");
    if (colon < 1) throw new UsageError(`Not a header line: "${line}"; write "Name: value"`);
    into[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
}

async function headersFrom(files: string | undefined, lines: string[]): Promise<Record<string, string>> {
  const headers: Record<string, string> = {};
  if (files) {
    const text = await readFile(files, "utf8");
    if (text.trimStart().startsWith("{")) {
      for (const [name, value] of Object.entries(JSON.parse(text) as Record<string, unknown>)) {
        headers[name.toLowerCase()] = String(value);
      }
    } else {
      parseHeaderLines(text.split(/\r?\n/), headers);
    }
  }
  parseHeaderLines(lines, headers);
  return headers;
}

function tolerance(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  if (!/^\d+$/.test(raw)) throw new UsageError("--tolerance must be a whole number of seconds");
  return Number(raw);
}

function describeVerification(outcome: WebhookVerification): string {
  return outcome.valid
    ? `valid (run ${outcome.runId}, signed ${new Date(outcome.timestamp * 1000).toISOString()})`
    : `invalid: ${outcome.reason}`;
}

async function verify(io: CommandIo, values: ReturnType<typeof parse>["values"]): Promise<number> {
  if (!values.secret || !values.body) throw new UsageError("webhook verify needs --secret and --body");
  if (!values.header?.length && !values.headers) {
    throw new UsageError("webhook verify needs the delivery's headers: --header or --headers");
  }
  const body = new Uint8Array(await readFile(values.body));
  const headers = await headersFrom(values.headers, values.header ?? []);
  const outcome = await verifyWebhook({
    secret: values.secret,
    headers,
    body,
    toleranceSeconds: tolerance(values.tolerance),
    vendor: values.vendor,
  });
  if (values.json) io.stdout.write(`${JSON.stringify(outcome)}\n`);
  else io.stdout.write(`Signature ${describeVerification(outcome)}\n`);
  return outcome.valid ? 0 : 1;
}

async function readBody(request: IncomingMessage): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function bodyForDisplay(body: Uint8Array): unknown {
  const text = new TextDecoder().decode(body);
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

async function listen(io: CommandIo, values: ReturnType<typeof parse>["values"]): Promise<number> {
  if (values.port === undefined || !/^\d+$/.test(values.port) || Number(values.port) > 65535) {
    throw new UsageError("webhook listen needs --port with a port number (0 picks a free one)");
  }
  const toleranceSeconds = tolerance(values.tolerance);
  const server = createServer(async (request, response) => {
    const body = await readBody(request);
    const outcome = values.secret
      ? await verifyWebhook({
        secret: values.secret,
        headers: request.headers,
        body,
        toleranceSeconds,
        vendor: values.vendor,
      })
      : undefined;
    const runId = request.headers["x-request-id"] ?? "-";
    const signature = outcome ? (outcome.valid ? "valid" : "invalid") : "not checked (no --secret)";
    if (values.json) {
      const reason = outcome && !outcome.valid ? { reason: outcome.reason } : {};
      io.stdout.write(
        `${
          jsonText({
            method: request.method,
            path: request.url,
            run_id: runId,
            signature,
            ...reason,
            body: bodyForDisplay(body),
          })
        }\n`,
      );
    } else {
      // Anyone who can reach the port chooses the path, the headers and the body.
      io.stdout.write(
        stripTerminalControls(
          `${request.method} ${request.url} run ${runId} signature ${
            outcome ? describeVerification(outcome) : signature
          }`,
        ) + "\n",
      );
      io.stdout.write(`${stripTerminalControls(JSON.stringify(bodyForDisplay(body), null, 2))}\n`);
    }
    response.writeHead(outcome && !outcome.valid ? 401 : 200, { "content-type": "application/json" });
    response.end(JSON.stringify({ received: true }));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(Number(values.port), values.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  io.stderr.write(`Listening for webhook deliveries on http://${values.host}:${port}/ (Ctrl-C to stop)\n`);
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.removeListener("SIGINT", stop);
      process.removeListener("SIGTERM", stop);
      io.signal?.removeEventListener("abort", stop);
      resolve();
    };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    if (io.signal?.aborted) stop();
    else io.signal?.addEventListener("abort", stop);
  });
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  return 0;
}

function parse(args: string[]) {
  return parseArgs({ args, allowPositionals: false, options: OPTIONS });
}

/** `runplane webhook verify|listen`. */
export async function webhookCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  if (sub === "verify") return verify(io, parse(rest).values);
  if (sub === "listen") return listen(io, parse(rest).values);
  throw new UsageError(
    sub ? `Unknown subcommand "${sub}": use verify or listen` : "Name a subcommand: verify or listen",
  );
}
