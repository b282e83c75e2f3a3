import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { LineSplitter, LineTooLong, type Payload } from "../../server/lines/mod.ts";
import {
  encodeCall,
  parseRawItem,
  parseWorkerMessage,
  payloadBytes,
  ProtocolViolation,
} from "../../server/runtime/_worker_protocol.ts";
import { InvalidJson, JsonValidator } from "../../server/runtime/_json_validator.ts";

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

describe("a big item handed through as its JSON text", () => {
  it("takes an object's or array's checked bytes from the line as the worker writes it", () => {
    const value = `{"pad":"${"x".repeat(100)}","word":"caf\\u00e9","n":[1,2.5e-7]}`;
    const item = parseRawItem(Buffer.from(`{"op":"item","id":"run_1","value":${value}}`));
    assert.equal(item?.id, "run_1");
    assert.equal(item?.value.text(), value);
    assert.deepEqual(item?.value.toJSON(), JSON.parse(value));
    assert.equal(
      parseRawItem(Buffer.from('{"op":"item","id":"r","value":[1,{"a":null}]}'))?.value.text(),
      '[1,{"a":null}]',
    );
  });

  it("leaves every other line to the parser, which decides what it is", () => {
    for (
      const line of [
        // Strings are decoded for their events; numbers and literals are small.
        '{"op":"item","id":"r","value":"text"}',
        '{"op":"item","id":"r","value":12}',
        // Not the worker's own layout: another order, an escaped id, other fields.
        '{"id":"r","op":"item","value":{}}',
        '{"op":"item","id":"r\\"x","value":{}}',
        '{"op":"item","id":"r","value":{},"op":"log"}',
        '{"op":"log","id":"r","value":{}}',
        // A carriage return between tokens would break the event's line; UTF-8 and broken JSON.
        '{"op":"item","id":"r","value":{"a":1,\r"b":2}}',
        '{"op":"item","id":"r","value":{"word":"café"}}',
        '{"op":"item","id":"r","value":{"a":}}',
        '{"op":"item","id":"r","value":{"a":1}}}',
        '{"op":"item","id":"r","value":{"a":NaN}}',
      ]
    ) {
      assert.equal(parseRawItem(Buffer.from(line)), undefined, line);
    }
  });
});

describe("a big result's header and raw payload", () => {
  it("a result carries exactly one of value and bytes; only a well-formed header announces a payload", () => {
    assert.deepEqual(parseWorkerMessage('{"op":"result","id":"r1","bytes":5}'), { op: "result", id: "r1", bytes: 5 });
    for (const line of ['{"op":"result","id":"r1","value":1,"bytes":5}', '{"op":"result","id":"r1","bytes":0}']) {
      assert.throws(() => parseWorkerMessage(line), ProtocolViolation, line);
    }
    assert.equal(payloadBytes(Buffer.from('{"op":"result","id":"r1","bytes":123}')), 123);
    assert.equal(payloadBytes(Buffer.from('{"op":"result","id":"r1","bytes":123,"value":1}')), 0);
    assert.equal(payloadBytes(Buffer.from('{"op":"result","id":"r1","bytes":-1}')), 0);
    assert.equal(payloadBytes(Buffer.from('{"op":"log","id":"r1","stream":"stdout","text":"\\"bytes\\":1"}')), 0);
    assert.equal(payloadBytes(Buffer.from('{"op":"result","id":"r1","bytes":67108865}')), 0);
  });

  it("the splitter hands a payload over whole, in its chunks, with the line that announced it", () => {
    const lines = new LineSplitter(1024, { payloadBytes: (line) => (String(line) === "head" ? 7 : 0) });
    assert.deepEqual(lines.push(Buffer.from("a\nhead\n12")), [Buffer.from("a")]);
    assert.deepEqual(lines.push(Buffer.from("34\n")), []);
    const [payload, after] = lines.push(Buffer.from("67b\nc"));
    assert.deepEqual(payload, {
      line: Buffer.from("head"),
      chunks: [Buffer.from("12"), Buffer.from("34\n"), Buffer.from("67")],
      bytes: 7,
    });
    assert.equal(String(after), "b");
    assert.equal(lines.pendingBytes, 1);
  });

  it("the validator accepts JSON text of one value and refuses anything else, however it is cut", () => {
    const valid = (text: string, cut: number) => {
      const validator = new JsonValidator();
      const bytes = Buffer.from(text);
      try {
        for (let i = 0; i < bytes.length; i += cut) validator.push(bytes.subarray(i, i + cut));
        validator.end();
        return true;
      } catch (error) {
        assert.ok(error instanceof InvalidJson);
        return false;
      }
    };
    const good = [
      "1",
      "-0",
      "0.5e+3",
      "1E5",
      '"a\\u00e9\\n\\"\\/"',
      "[]",
      "{}",
      ' {"a" : 1 , "b":{"c":-1.5E-2}} ',
      '[1,[2,{"a":[]}],"x",true,false,null]',
    ];
    const bad = ["", "01", "-", "1.", "1e", "[1,]", '{"a"}', '{"a":1,}', "[1 2]", '"abc', "tru", "nul", "{1:2}"];
    bad.push('"\\x"', '"\\u12g4"', "[}", "1 2", '"a\nb"', '{"a":1]', "]", "[", "NaN", "Infinity", ".5");
    for (const cut of [1, 2, 3, 1000]) {
      for (const text of good) {
        JSON.parse(text);
        assert.ok(valid(text, cut), `${text} cut every ${cut}`);
      }
      for (const text of bad) {
        assert.throws(() => JSON.parse(text));
        assert.ok(!valid(text, cut), `${JSON.stringify(text)} cut every ${cut}`);
      }
      // The worker encodes with ensure_ascii: any other byte is refused, even in a string.
      assert.ok(!valid('"\u00e9"', cut));
    }
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
