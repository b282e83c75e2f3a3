import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { guardedPost } from "../../server/runtime/_guarded_fetch.ts";
import { DestinationRefusedError } from "../../server/webhooks/mod.ts";

describe("guardedPost", () => {
  let service: Server;
  let elsewhere: Server;
  let port: number;
  let elsewherePort: number;
  const hits: string[] = [];

  before(async () => {
    elsewhere = createServer((req, res) => {
      hits.push(`elsewhere ${req.method} ${req.url}`);
      res.end("elsewhere");
    });
    service = createServer((req, res) => {
      let body = "";
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        hits.push(`${req.method} ${req.url} ${body}`);
        if (req.url === "/redirect") {
          res.writeHead(307, { Location: `http://127.0.0.1:${elsewherePort}/steal` }).end("moved");
        } else if (req.url === "/empty") {
          res.writeHead(204).end();
        } else {
          res.writeHead(200, { "Content-Type": "application/json", "X-Seen": req.headers["x-request-id"] ?? "" })
            .end(JSON.stringify({ body }));
        }
      });
    });
    for (const server of [service, elsewhere]) {
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    }
    port = (service.address() as AddressInfo).port;
    elsewherePort = (elsewhere.address() as AddressInfo).port;
  });
  after(() => {
    service.close();
    elsewhere.close();
  });

  function post(url: string, allowPrivate: boolean): Promise<Response> {
    return guardedPost(new URL(url), {
      headers: { "content-type": "application/json", "x-request-id": "run_1" },
      body: '{"a":1}',
      signal: AbortSignal.timeout(5_000),
      guard: { allowPrivate },
    });
  }

  it("refuses a loopback address, literal or by name, before connecting", async () => {
    hits.length = 0;
    for (const host of ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"]) {
      await assert.rejects(post(`http://${host}:${port}/run`, false), (error) => {
        assert.ok(error instanceof DestinationRefusedError, String(error));
        assert.match(error.message, /loopback/);
        return true;
      });
    }
    await assert.rejects(post("http://169.254.169.254/latest/meta-data", false), /metadata|link-local/);
    assert.deepEqual(hits, []);
  });

  it("posts to an allowed address and answers its status, headers and streamed body", async () => {
    hits.length = 0;
    const response = await post(`http://localhost:${port}/run`, true);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("x-seen"), "run_1");
    assert.deepEqual(await response.json(), { body: '{"a":1}' });
    assert.deepEqual(hits, ['POST /run {"a":1}']);
    const empty = await post(`http://127.0.0.1:${port}/empty`, true);
    assert.equal(empty.status, 204);
    assert.equal(await empty.text(), "");
  });

  it("answers a redirect as it is, never following it", async () => {
    hits.length = 0;
    const response = await post(`http://127.0.0.1:${port}/redirect`, true);
    assert.equal(response.status, 307);
    assert.equal(await response.text(), "moved");
    assert.deepEqual(hits, ['POST /redirect {"a":1}']);
  });
});
