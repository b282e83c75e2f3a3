/**
 * Sends HTTP/1.1 requests byte for byte over a TCP socket, for what `fetch` cannot send: a header
 * twice, two `Content-Length`s, thousands of headers.
 */
import { connect } from "node:net";

/** An answer as it came off the wire. */
export interface RawResponse {
  status: number;
  /** Header names in lower case; a repeated header's values joined with ", ". */
  headers: Record<string, string>;
  body: string;
}

/** Writes `head` (request line and headers, without the blank line) and `body`, reads until the server closes. */
export async function rawRequest(url: string, head: string[], body = ""): Promise<RawResponse> {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port) });
  const chunks: Buffer[] = [];
  await new Promise<void>((resolve, reject) => {
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("end", resolve);
    socket.on("close", () => resolve());
    socket.on("error", (error: NodeJS.ErrnoException) => {
      // The server may close as soon as it has answered, before it read everything we sent.
      if (error.code === "ECONNRESET" || error.code === "EPIPE") resolve();
      else reject(error);
    });
    socket.write([...head, "Connection: close", "", ""].join("\r\n") + body);
  });
  const text = Buffer.concat(chunks).toString("utf8");
  const split = text.indexOf("\r\n\r\n");
  if (split < 0) throw new Error(`No complete answer: ${JSON.stringify(text.slice(0, 200))}`);
  const [statusLine, ...lines] = text.slice(0, split).split("\r\n");
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(":");
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
  }
  let rest = text.slice(split + 4);
  if (headers["transfer-encoding"] === "chunked") {
    let decoded = "";
    while (rest.length) {
      const end = rest.indexOf("\r\n");
      const size = parseInt(rest.slice(0, end), 16);
      if (!size) break;
      decoded += rest.slice(end + 2, end + 2 + size);
      rest = rest.slice(end + 2 + size + 2);
    }
    rest = decoded;
  }
  return { status: Number(statusLine.split(" ")[1]), headers, body: rest };
}
