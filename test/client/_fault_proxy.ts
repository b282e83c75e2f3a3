/**
 * A loopback HTTP proxy in front of a real server that breaks chosen requests the way a network or a load
 * balancer does: it forwards a request, lets the server answer (an async run is committed before its
 * 202), then resets or closes the caller's connection before a byte of the answer reaches it; or it
 * answers 503 with `Retry-After` itself, as a load balancer with no healthy backend does.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { assertMatchesContract } from "../_helpers/contract.ts";

/**
 * What the proxy does to one request: `reset` sends a TCP RST (the caller sees ECONNRESET) and `close`
 * a FIN (undici's "other side closed"), both once the server's answer has begun; `{ status: 503 }`
 * answers without asking the server. Every answer that reaches the caller is checked against the contract
 * on the way (`contractErrors`), the proxy's own 503s included.
 */
export type Fault = "reset" | "close" | { status: 503; retryAfter: number };

/** A request the proxy saw. */
export interface SeenRequest {
  method: string;
  path: string;
  idempotencyKey: string | undefined;
  /** What the proxy did to it; undefined when it was forwarded untouched. */
  fault: Fault | undefined;
}

/** A running proxy; close it in `after`. */
export interface FaultProxy {
  url: string;
  /** Every request so far, in arrival order. */
  seen: SeenRequest[];
  /** Each answer so far that did not match the contract, once all are checked; a test expects none. */
  contractErrors(): Promise<string[]>;
  close(): Promise<void>;
}

/** Starts a proxy to `target` (a base URL); `fault` decides per request (and its index among the seen). */
export async function startFaultProxy(
  target: string,
  options: { fault(request: IncomingMessage, index: number): Fault | undefined },
): Promise<FaultProxy> {
  const upstream = new URL(target);
  const seen: SeenRequest[] = [];
  const checks: Array<Promise<string | undefined>> = [];
  function check(request: IncomingMessage, answer: { status: number; headers: Headers; body: Buffer | null }) {
    const body = answer.body ? new Uint8Array(answer.body) : null;
    const response = new Response(body, { status: answer.status, headers: answer.headers });
    checks.push(
      assertMatchesContract(request.method!, new URL(request.url!, target), response).then(
        () => undefined,
        (error: Error) => error.message,
      ),
    );
  }
  const server = createServer((req, res) => {
    const fault = options.fault(req, seen.length);
    const key = req.headers["idempotency-key"];
    seen.push({
      method: req.method!,
      path: req.url!,
      idempotencyKey: typeof key === "string" ? key : undefined,
      fault,
    });
    if (typeof fault === "object") {
      req.resume();
      const headers = {
        "Content-Type": "application/problem+json",
        "Retry-After": String(fault.retryAfter),
        "X-Request-Id": "req_fault_proxy",
      };
      const body = Buffer.from(JSON.stringify({
        type: "https://runplane.dev/problems/service-unavailable",
        title: "Service unavailable",
        status: 503,
        detail: "No backend can take the call now; retry after Retry-After",
      }));
      check(req, { status: 503, headers: new Headers(headers), body });
      res.writeHead(503, headers).end(body);
      return;
    }
    const forwarded = httpRequest({
      host: upstream.hostname,
      port: upstream.port,
      method: req.method,
      path: req.url,
      headers: req.headers,
    }, (answer) => {
      if (fault === "reset" || fault === "close") {
        answer.resume();
        if (fault === "reset") req.socket.resetAndDestroy();
        else req.socket.destroy();
        return;
      }
      const status = answer.statusCode!;
      const headers = webHeaders(answer.headers);
      res.writeHead(status, answer.rawHeaders);
      if (headers.get("content-type")?.startsWith("text/event-stream")) {
        // A stream is checked by its status and headers, as the contract witness does.
        check(req, { status, headers, body: null });
        answer.pipe(res);
        return;
      }
      const chunks: Buffer[] = [];
      answer.on("data", (chunk: Buffer) => chunks.push(chunk));
      answer.on("end", () => {
        const body = Buffer.concat(chunks);
        check(req, { status, headers, body: status === 204 || status === 304 ? null : body });
        res.end(body);
      });
    });
    forwarded.on("error", () => res.destroy());
    req.pipe(forwarded);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    async contractErrors() {
      return (await Promise.all(checks)).filter((message) => message !== undefined);
    },
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

function webHeaders(headers: IncomingHttpHeaders): Headers {
  const out = new Headers();
  for (const [name, value] of Object.entries(headers)) {
    for (const each of Array.isArray(value) ? value : value === undefined ? [] : [value]) out.append(name, each);
  }
  return out;
}
