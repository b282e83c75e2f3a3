import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { inspect } from "node:util";
import { describe, it } from "node:test";
import { parseMasterKey } from "../../server/keys/mod.ts";

describe("parseMasterKey", () => {
  it("takes 32 bytes in base64, standard or URL-safe, with or without padding", () => {
    const bytes = randomBytes(32);
    for (const text of [bytes.toString("base64"), bytes.toString("base64url"), ` ${bytes.toString("base64")}\n`]) {
      assert.deepEqual(Buffer.from(parseMasterKey(text).bytes()), bytes);
    }
  });

  it("refuses other lengths and non-base64 text, saying how to make a key and never repeating the text", () => {
    for (const text of [randomBytes(31).toString("base64"), randomBytes(33).toString("base64"), "pass word!", "abc"]) {
      assert.throws(
        () => parseMasterKey(text),
        (error: Error) =>
          /must be 32 random bytes in base64/.test(error.message)
          && error.message.includes("openssl rand -base64 32")
          && !error.message.includes(text.trim()),
      );
    }
  });

  it("hides its bytes from JSON, strings and util.inspect", () => {
    const text = randomBytes(32).toString("base64");
    const key = parseMasterKey(text);
    const hex = Buffer.from(key.bytes()).toString("hex");
    for (const shown of [JSON.stringify({ key }), String(key), inspect({ key }, { depth: 5, showHidden: true })]) {
      assert.ok(!shown.includes(text) && !shown.includes(hex), shown);
      assert.match(shown, /redacted/);
    }
  });
});
