import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { readEventStream } from "../../client/event_stream.ts";
import { isRunplaneError } from "../../client/runplane_error.ts";

/**
 * A plain SSE producer on a real socket (not a Runplane server): each test gets the open response and
 * writes events when it wants, so "before the end" and "closed by the reader" are observable.
 */
describe("readEventStream over a real socket", () => {
  let server: Server;
  let url: string;
  const waiting: Array<(response: ServerResponse) => void> = [];
  before(async () => {
    server = createServer((_request, response) => {
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.flushHeaders();
      waiting.shift()?.(response);
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  async function open(signal?: AbortSignal) {
    const producer = new Promise<ServerResponse>((resolve) => waiting.push(resolve));
    const response = await fetch(url, { signal });
    return { response: await producer, items: readEventStream(response.body!)[Symbol.asyncIterator]() };
  }

  it("yields each item as it arrives, JSON parsed and text as strings", async () => {
    const { response, items } = await open();
    response.write(': ping\n\ndata: {"n":1}\n\n');
    assert.deepEqual(await items.next(), { done: false, value: { n: 1 } });
    response.write("data: hello world\n\n");
    assert.deepEqual(await items.next(), { done: false, value: "hello world" });
    response.write("data: line one\ndata: line two\n\n");
    assert.deepEqual(await items.next(), { done: false, value: "line one\nline two" });
    response.end();
    assert.equal((await items.next()).done, true);
  });

  it("throws a RunplaneError carrying the problem of an event: error", async () => {
    const { response, items } = await open();
    const problem = {
      type: "https://runplane.dev/problems/function-error",
      title: "The function raised an exception",
      status: 500,
      detail: "boom",
      run_id: "run_0123456789abcdefghijklmnop",
      exception_type: "ValueError",
    };
    response.end(`data: 1\n\nevent: error\ndata: ${JSON.stringify(problem)}\n\n`);
    assert.deepEqual(await items.next(), { done: false, value: 1 });
    const error = await items.next().then(() => undefined, (e: unknown) => e);
    assert.ok(isRunplaneError(error));
    assert.equal(error.problem.exception_type, "ValueError");
    assert.equal(error.runId, problem.run_id);
    assert.equal(error.status, 500);
  });

  it("closes the connection when the reader stops early", async () => {
    const { response, items } = await open();
    response.write("data: 1\n\n");
    await items.next();
    const closed = once(response, "close");
    await items.return(undefined);
    await closed;
    assert.equal(response.writableEnded, false, "the producer never ended: the reader closed the connection");
  });

  it("closes the connection when the request is aborted", async () => {
    const controller = new AbortController();
    const { response, items } = await open(controller.signal);
    response.write("data: 1\n\n");
    await items.next();
    const closed = once(response, "close");
    controller.abort();
    await assert.rejects(items.next(), { name: "AbortError" });
    await closed;
  });
});
