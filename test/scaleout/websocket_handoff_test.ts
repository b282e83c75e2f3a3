import assert from "node:assert/strict";
import type { Worker } from "node:cluster";
import type { IncomingMessage } from "node:http";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { handOffToSupervisor, takeHandoffs } from "../../server/host/websocket_handoff.ts";

/** A connected pair of sockets over loopback: the server's side and the client's. */
async function socketPair(server: Server): Promise<{ served: Socket; client: Socket }> {
  const served = new Promise<Socket>((resolve) => server.once("connection", resolve));
  const address = server.address() as { port: number };
  const client = createConnection(address.port, "127.0.0.1");
  client.on("error", () => undefined);
  return { served: await served, client };
}

/** Everything `client` reads until the other side closes. */
function readAll(client: Socket): Promise<string> {
  let text = "";
  client.on("data", (chunk: Buffer) => (text += chunk));
  return new Promise((resolve) => client.once("close", () => resolve(text)));
}

const WORKER = { process: { pid: 1 } } as unknown as Worker;

describe("WebSocket handoffs from a worker to its supervisor", () => {
  let server: Server;
  before(async () => {
    server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  });
  after(() => server.close());

  it("hands the upgrade to the listener with the request rebuilt from the raw headers and the head bytes", async () => {
    const { served, client } = await socketPair(server);
    const seen = new Promise<{ request: IncomingMessage; head: Buffer; socket: unknown }>((resolve) => {
      const receiver = takeHandoffs({ upgrade: (request, socket, head) => resolve({ request, socket, head }) });
      const message = {
        runplane: "websocket-handoff",
        method: "GET",
        url: "/v4/p-demo/ws/echo?x=1",
        rawHeaders: ["Host", "a", "Host", "b", "X-Many", "1", "x-many", "2", "Cookie", "a=1", "Cookie", "b=2"],
        remoteAddress: "127.0.0.1",
        headBase64: Buffer.from("early").toString("base64"),
      };
      assert.equal(receiver.receive(WORKER, message, served), true);
      assert.equal(receiver.held, 1);
    });
    const { request, head, socket } = await seen;
    assert.equal(request.method, "GET");
    assert.equal(request.url, "/v4/p-demo/ws/echo?x=1");
    assert.deepEqual(
      { host: request.headers.host, many: request.headers["x-many"], cookie: request.headers.cookie },
      { host: "a", many: "1, 2", cookie: "a=1; b=2" },
    );
    assert.equal(request.socket, served);
    assert.equal(socket, served);
    assert.equal(head.toString(), "early");
    client.destroy();
  });

  it("destroys the handle of a malformed handoff and of a message that should carry none", async () => {
    const receiver = takeHandoffs({ upgrade: () => assert.fail("a malformed handoff was handled") });
    const bad = await socketPair(server);
    const badClosed = readAll(bad.client);
    assert.equal(receiver.receive(WORKER, { runplane: "websocket-handoff", url: 7 }, bad.served), true);
    assert.equal(await badClosed, "");
    const stray = await socketPair(server);
    const strayClosed = readAll(stray.client);
    assert.equal(receiver.receive(WORKER, { runplane: "replica-kill", replica: 1 }, stray.served), true);
    assert.equal(await strayClosed, "");
    assert.equal(receiver.receive(WORKER, { runplane: "replica-kill", replica: 1 }, undefined), false);
    assert.equal(receiver.receive(WORKER, { runplane: "websocket-handoff" }, undefined), true);
    assert.equal(receiver.held, 0);
  });

  it("answers 503 with Retry-After on a worker whose supervisor is gone", async () => {
    const { served, client } = await socketPair(server);
    const answer = readAll(client);
    const handOff = handOffToSupervisor(() => assert.fail("sent without a supervisor"), { connected: () => false });
    await handOff({ method: "GET", url: "/", rawHeaders: [] } as unknown as IncomingMessage, served, Buffer.alloc(0));
    const text = await answer;
    assert.match(text, /^HTTP\/1\.1 503 /);
    assert.match(text, /\r\nRetry-After: 1\r\n/);
  });

  it("sends the request and its head bytes with the socket, and closes it if the send fails", async () => {
    const { served, client } = await socketPair(server);
    const closed = readAll(client);
    let sent: Record<string, unknown> | undefined;
    const handOff = handOffToSupervisor((message, socket, callback) => {
      sent = { ...message, same: socket === served };
      callback(new Error("the channel closed"));
      return false;
    }, { connected: () => true });
    await handOff(
      { method: "GET", url: "/v4/p/a/b", rawHeaders: ["Upgrade", "websocket"] } as unknown as IncomingMessage,
      served,
      Buffer.from("hd"),
    );
    assert.equal(await closed, "");
    assert.deepEqual(sent, {
      runplane: "websocket-handoff",
      method: "GET",
      url: "/v4/p/a/b",
      rawHeaders: ["Upgrade", "websocket"],
      remoteAddress: "127.0.0.1",
      headBase64: Buffer.from("hd").toString("base64"),
      same: true,
    });
  });
});
