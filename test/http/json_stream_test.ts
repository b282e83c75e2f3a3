import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { encodeIfSmall, jsonChunks } from "../../server/http/json_stream.ts";
import { RawJson } from "../../server/json/mod.ts";

describe("jsonChunks", () => {
  it("joins to exactly JSON.stringify's text for every kind of value", () => {
    const values: unknown[] = [
      null,
      0,
      -1.5,
      'quote " and \u2028 line separator',
      true,
      [],
      {},
      [1, undefined, () => 1, [2, [3]], { a: undefined, b: null }],
      { a: 1, skip: undefined, fn: () => 1, nested: { list: [{ x: "y" }], when: new Date(0) }, 'we"ird': [null] },
      { toJSON: () => ({ replaced: true }) },
      new Date(1_700_000_000_000),
    ];
    for (const value of values) {
      assert.equal([...jsonChunks(value, { chunkChars: 4 })].join(""), JSON.stringify(value), JSON.stringify(value));
    }
  });

  it("cuts a large array into chunks near the requested size, none holding the whole text", () => {
    const entries = Array.from(
      { length: 20_000 },
      (_, i) => ({ path: `src/f${i}.txt`, type: "file", mode: "100644", sha: "a".repeat(40), size: i }),
    );
    const value = { owner: "acme", entries };
    const chunks = [...jsonChunks(value, { chunkChars: 16_384 })];
    const whole = JSON.stringify(value);
    assert.equal(chunks.join(""), whole);
    assert.ok(chunks.length > whole.length / 20_000, `${chunks.length} chunks`);
    assert.ok(chunks.every((chunk) => chunk.length < 16_384 + 200), "each chunk stays near the limit");
  });

  it("encodes lazily: nothing past the first chunk is encoded until asked for", () => {
    let encoded = 0;
    const items = Array.from({ length: 1_000 }, (_, i) => ({ toJSON: () => (encoded++, { i }) }));
    const chunks = jsonChunks(items, { chunkChars: 100 });
    chunks.next();
    assert.ok(encoded < 50, `encoded ${encoded} of 1000 items for the first chunk`);
  });
});

describe("RawJson in an answer", () => {
  it("is written as its own text, chunk by chunk, never parsed; encodeIfSmall always declines it", () => {
    const text = '{"n":[1,2e5,"\\u00e9"],"s":"' + "y".repeat(200_000) + '"}';
    const chunks = [
      Buffer.from(text.slice(0, 7)),
      Buffer.from(text.slice(7, 100_000)),
      Buffer.from(text.slice(100_000)),
    ];
    const raw = new RawJson(chunks, text.length);
    let parsed = false;
    const parse = JSON.parse;
    JSON.parse = (...args: Parameters<typeof JSON.parse>) => ((parsed = true), parse(...args));
    try {
      const body = { run_id: "r", result: raw, list: [raw] };
      assert.equal(encodeIfSmall(body), undefined);
      const pieces = [...jsonChunks(body, { chunkChars: 1024 })];
      assert.equal(pieces.join(""), `{"run_id":"r","result":${text},"list":[${text}]}`);
      assert.ok(pieces.length > 2);
    } finally {
      JSON.parse = parse;
    }
    assert.equal(parsed, false, "the text was not parsed");
  });
});

describe("encodeIfSmall", () => {
  it("gives JSON.stringify's text for a small value, toJSON included", () => {
    for (const value of [null, 1, "x", [1, { a: [2] }], { when: new Date(0), n: { toJSON: () => "replaced" } }]) {
      assert.equal(encodeIfSmall(value), JSON.stringify(value));
    }
  });

  it("declines a large value without encoding it, however it is large", () => {
    let encoded = 0;
    const many = Array.from({ length: 100_000 }, (_, i) => ({ toJSON: () => (encoded++, i) }));
    assert.equal(encodeIfSmall(many), undefined);
    assert.equal(encoded, 0, "sizing must not encode");
    assert.equal(encodeIfSmall({ text: "a".repeat(70_000) }), undefined);
    assert.equal(encodeIfSmall({ text: "a".repeat(1_000) }, 500), undefined);
  });

  it("encodes a long string a piece at a time, never splitting a surrogate pair or an escape", () => {
    const text = `${"a".repeat(99)}😀"\\\n\u0001${"é😀".repeat(300)}`;
    const chunks = [...jsonChunks({ result: text, list: [text] }, { chunkChars: 100 })];
    assert.ok(chunks.length > 10);
    assert.equal(chunks.join(""), JSON.stringify({ result: text, list: [text] }));
    assert.deepEqual(JSON.parse(chunks.join("")), { result: text, list: [text] });
  });
});
