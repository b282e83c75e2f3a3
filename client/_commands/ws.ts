import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { type CommandIo, UsageError } from "../cli_command.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { CONNECTION_HELP, CONNECTION_OPTIONS, serverUrls } from "./connection.ts";

/** Help of `runplane ws`. */
export const WS_HELP = `Usage: runplane ws <project>/<app>/<path> [--protocol <name>]

Opens a WebSocket to a custom runtime's route (a WebSocket run, run scope) and pipes it as websocat does:
each line of stdin is sent as a text message; each message received is written to stdout, one a line
(a binary one as base64). Stdin's end closes the connection (1000): what the app sends after that is
not shown, so keep stdin open until the app is done (or interrupt with Ctrl-C). Exits 0 when it closed normally
(1000, 1001 or no code), 1 otherwise, with the close code and reason on stderr.

  --protocol <name>  offer this subprotocol (Sec-WebSocket-Protocol); repeat for more

${CONNECTION_HELP}`;

/** Close codes of a connection that ended as it should. */
const NORMAL = new Set([1000, 1001, 1005]);

/** The refusal of the upgrade as an error: the status and the problem's detail. */
function refusal(status: number | undefined, body: string): Error {
  let detail = body.slice(0, 500);
  try {
    detail = (JSON.parse(body) as { detail?: string }).detail ?? detail;
  } catch {
    // Not a problem document: its text as it is.
  }
  return new Error(`The server refused the WebSocket (${status}): ${detail}`);
}

/** `runplane ws`: a WebSocket run piped to stdin and stdout. */
export async function wsCommand(io: CommandIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args: io.args,
    allowPositionals: true,
    options: { ...CONNECTION_OPTIONS, protocol: { type: "string", multiple: true } },
  });
  const match = /^([^/]+)\/([^/]+)\/(.*)$/.exec(positionals[0] ?? "");
  if (!match || positionals.length > 1) throw new UsageError("ws needs one <project>/<app>/<path>");
  const { apiUrl } = serverUrls(values, io.env);
  const token = values.token ?? io.env.RUNPLANE_TOKEN;
  const url = `${apiUrl.replace(/\/+$/, "").replace(/^http/, "ws")}/v4/${match[1]}/${match[2]}/${match[3]}`;
  const socket = new WebSocket(url, values.protocol ?? [], {
    headers: token ? { Authorization: `Bearer ${token}` } : {},
    perMessageDeflate: false,
  });
  const terminal = (io.stdout as { isTTY?: boolean }).isTTY === true;
  return await new Promise<number>((resolve, reject) => {
    socket.once("unexpected-response", (_request, response) => {
      let body = "";
      response.setEncoding("utf8").on("data", (chunk: string) => (body += chunk));
      response.on("end", () => reject(refusal(response.statusCode, body)));
    });
    socket.once("error", reject);
    socket.once("open", () => {
      const lines = createInterface({ input: io.stdin ?? process.stdin });
      lines.on("line", (line) => socket.send(line));
      lines.once("close", () => socket.close(1000));
      socket.once("close", () => lines.close());
    });
    socket.on("message", (data: Buffer, isBinary: boolean) => {
      // What an app sends never drives the terminal: its control sequences are dropped there.
      const text = isBinary ? data.toString("base64") : data.toString("utf8");
      io.stdout.write(`${terminal ? stripTerminalControls(text) : text}\n`);
    });
    socket.once("close", (code: number, reason: Buffer) => {
      if (!NORMAL.has(code)) io.stderr.write(`Closed with ${code}${reason.length ? `: ${reason}` : ""}\n`);
      resolve(NORMAL.has(code) ? 0 : 1);
    });
    io.signal?.addEventListener("abort", () => socket.close(1001), { once: true });
  });
}
