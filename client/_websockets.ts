/**
 * A WebSocket to a custom runtime's route (issue 47): a single-use ticket minted over the REST API
 * (`createWebSocketTicket`), then the run API's `ws(s)://…/v4/{project}/{app}/{path}?ticket=…`. The ticket
 * works where no header can be sent (a browser) as where one can, so the token never rides in a URL.
 */
import { type ClientContext, unwrap } from "./_client_context.ts";
import { resolveAppRef } from "./app_ref.ts";
import type { AppRef } from "./app_ref.ts";

/**
 * What `connect` resolves with when no class is given: the platform's WebSocket, as far as this package
 * names it (its types need no DOM library); narrow it with your own class's type.
 */
export interface WebSocketLike {
  readonly readyState: number;
  readonly protocol: string;
  send(data: string | ArrayBuffer | Uint8Array): void;
  close(code?: number, reason?: string): void;
}

/** A WebSocket class: the platform's (a browser's, Node 22's) or one such as the `ws` package's. */
export type WebSocketClass<S> = new(url: string, protocols?: string | string[]) => S;

/** Options of `connect`. */
export interface ConnectOptions<S> {
  /** The WebSocket class to open with; default `globalThis.WebSocket` (absent on Node 20: pass `ws`'s). */
  WebSocket?: WebSocketClass<S>;
  /** Subprotocols to offer (`Sec-WebSocket-Protocol`); the app picks one. */
  protocols?: string | string[];
  /** Aborts minting the ticket. */
  signal?: AbortSignal;
}

/** The WebSocket calls of a client. */
export class WebSockets {
  readonly #client: ClientContext;
  readonly #runUrl: string;

  /** Calls over `client`'s REST API; the connection goes to `runUrl` (the run API). */
  constructor(client: ClientContext, runUrl: string) {
    this.#client = client;
    this.#runUrl = runUrl;
  }

  /**
   * Opens a WebSocket to `path` (with its query string, if any) of the custom runtime `app`: resolves with
   * the socket as constructed (wait for its `open` event), a run of mode `websocket` once it opens. Throws
   * a `RunplaneError` when the ticket is refused (400 a Python app, 404, 403), a `TypeError` without a
   * WebSocket class.
   */
  async connect<S = WebSocketLike>(app: AppRef, path: string, options: ConnectOptions<S> = {}): Promise<S> {
    const Class = options.WebSocket
      ?? (globalThis as unknown as { WebSocket?: WebSocketClass<S> }).WebSocket;
    if (!Class) {
      throw new TypeError(
        "This runtime has no WebSocket class (Node 20): pass options.WebSocket, e.g. the ws package's",
      );
    }
    const { project, app: name } = resolveAppRef(app);
    const minted = await unwrap(this.#client.api.POST("/v3/projects/{project_id}/apps/{app_id}/websocket-tickets", {
      params: { path: { project_id: project, app_id: name } },
      signal: options.signal,
    }));
    const base = this.#runUrl.endsWith("/") ? this.#runUrl : `${this.#runUrl}/`;
    const url = new URL(
      `v4/${encodeURIComponent(project)}/${encodeURIComponent(name)}/${path.replace(/^\/+/, "")}`,
      base,
    );
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("ticket", minted.ticket);
    return new Class(url.href, options.protocols);
  }
}
