import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { LineSplitter, LineTooLong, type Payload } from "../../server/runtime/_line_splitter.ts";
import { encodeCall, parseWorkerMessage, ProtocolViolation } from "../../server/runtime/_worker_protocol.ts";

describe("worker protocol", () => {
  it("parses each op of the table into its message", () => {
    assert.deepEqual(parseWorkerMessage('{"op":"result","id":"r1","value":[1,2]}'), {
      op: "result",
      id: "r1",
      value: [1, 2],
    });
    assert.equal(parseWorkerMessage('{"op":"ready","pid":12}').op, "ready");
    assert.equal(parseWorkerMessage('{"op":"result","id":"r1","value":null}').op, "result");
    assert.equal(
      parseWorkerMessage('{"op":"fail","id":"r","kind":"exception","type":"E","message":"m","traceback":null}').op,
      "fail",
    );
  });

  it("refuses malformed lines, unknown ops and missing or mistyped fields", () => {
    for (
      const line of [
        "not json",
        "[1]",
        "null",
        '{"op":"explode","id":"r"}',
        '{"op":"toString","id":"r"}',
        '{"id":"r"}',
        '{"op":"result","id":"r"}',
        '{"op":"item","id":7,"value":1}',
        '{"op":"log","id":"r","stream":"stdin","text":"x"}',
        '{"op":"fail","id":"r","kind":"whatever","type":"E","message":"m"}',
        '{"op":"ready","pid":-1}',
      ]
    ) {
      assert.throws(() => parseWorkerMessage(line), ProtocolViolation, line);
    }
  });

  it("splices the arguments' own JSON text into a call, line breaks made spaces", () => {
    const line = encodeCall(
      { op: "call", id: "r1", run_id: "r1", fn: "f", kwargs: {} },
      { kwargsJson: '{\n"a": 1e400,\r\n"b": 1152921504606846976}' },
    );
    assert.equal(line.indexOf("\n"), line.length - 1);
    assert.equal(
      line,
      '{"op":"call","id":"r1","run_id":"r1","fn":"f","kwargs":{ "a": 1e400,  "b": 1152921504606846976}}\n',
    );
  });
});

describe("line splitter", () => {
  it("splits lines across chunks and joins a line's chunks once", () => {
    const lines = new LineSplitter(1024);
    assert.deepEqual(lines.push(Buffer.from("ab")), []);
    assert.deepEqual(lines.push(Buffer.from("c\nde\n\nf")).map(String), ["abc", "de", ""]);
    assert.equal(lines.pendingBytes, 1);
    assert.deepEqual(lines.push(Buffer.from("g\n")).map(String), ["fg"]);
    assert.equal(lines.pendingBytes, 0);
  });

  it("throws once an open line passes the limit, and accepts a line at the limit", () => {
    const lines = new LineSplitter(10);
    assert.deepEqual(lines.push(Buffer.from("123456789\n")).map(String), ["123456789"]);
    lines.push(Buffer.from("12345"));
    assert.throws(() => lines.push(Buffer.from("67890")), LineTooLong);
    assert.throws(() => new LineSplitter(10).push(Buffer.from("1234567890\n")), LineTooLong);
  });

  it("reads a 50 MB line in linear time", () => {
    const lines = new LineSplitter(64 * 1024 * 1024);
    const chunk = Buffer.alloc(65536, 120);
    let found: Array<Buffer | Payload> = [];
    for (let i = 0; i < 800; i++) found = lines.push(chunk);
    found = lines.push(Buffer.from("\n"));
    assert.equal(found.length, 1);
    assert.equal((found[0] as Buffer).length, 800 * 65536);
  });
});

describe("the Python worker's reader", () => {
  it("survives unreadable requests: a too-deep call fails alone, garbage is ignored, the next call runs", async () => {
    const dir = await mkdtemp(join(tmpdir(), "runplane-worker-"));
    await writeFile(join(dir, "main.py"), "def echo(x):\n    return x\n");
    const worker = fileURLToPath(new URL("../../server/runtime/_worker.py", import.meta.url));
    const child = spawn("python3", [worker, dir, "1"], { stdio: ["ignore", "pipe", "pipe", "pipe", "pipe"] });
    const requests = child.stdio[3] as Writable;
    const messages: Array<Record<string, unknown>> = [];
    const splitter = new LineSplitter(1 << 26);
    const got = (test: (m: Record<string, unknown>) => boolean) =>
      new Promise<Record<string, unknown>>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no such message in ${JSON.stringify(messages)}`)), 10_000);
        const check = () => {
          const found = messages.find(test);
          if (found) {
            clearTimeout(timer);
            resolve(found);
          } else setTimeout(check, 20);
        };
        check();
      });
    (child.stdio[4] as Readable).on("data", (chunk: Buffer) => {
      for (const line of splitter.push(chunk)) messages.push(JSON.parse(String(line)));
    });
    try {
      await got((m) => m.op === "ready");
      const deep = `${"[".repeat(100_000)}${"]".repeat(100_000)}`;
      requests.write("this is not json\n");
      requests.write(encodeCall({ op: "call", id: "deep", run_id: "deep", fn: "echo", kwargs: {} }, {
        kwargsJson: `{"x": ${deep}}`,
      }));
      requests.write(encodeCall({ op: "call", id: "fine", run_id: "fine", fn: "echo", kwargs: { x: 7 } }));
      const failed = await got((m) => m.id === "deep");
      assert.equal(failed.op, "fail");
      assert.equal(failed.kind, "bad_request");
      assert.equal(failed.type, "RecursionError");
      assert.deepEqual(await got((m) => m.id === "fine"), { op: "result", id: "fine", value: 7 });
    } finally {
      child.kill("SIGKILL");
    }
  });
});
