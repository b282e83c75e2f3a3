/**
 * Type-level tests of `SETTINGS`: `npm run check` (tsc) fails if a `@ts-expect-error` below stops being an
 * error, i.e. if a setting's parser could again return another type than its `Config` key unnoticed.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type AnySetting, loadConfig, SETTINGS } from "../../server/config.ts";

const base = { env: "X", flag: "--x", default: "", description: "x" };

describe("setting types", () => {
  it("a parser is typed against its Config key", () => {
    const port: AnySetting = { ...base, key: "port", parse: (raw) => Number(raw) };
    // @ts-expect-error `port` is a number: a parser returning the raw string does not compile.
    const portAsText: AnySetting = { ...base, key: "port", parse: (raw) => raw };
    // @ts-expect-error `logLevel` is a union of level names, not any string.
    const anyLevel: AnySetting = { ...base, key: "logLevel", parse: (raw: string) => raw };
    // @ts-expect-error `metricsToken` is `string | null`, never undefined.
    const missingToken: AnySetting = { ...base, key: "metricsToken", parse: () => undefined };
    // @ts-expect-error a key that `Config` does not have.
    const unknown: AnySetting = { ...base, key: "colour", parse: (raw: string) => raw };
    // The parsers still run as written (the errors above are about types only).
    assert.equal(port.parse("8", {}), 8);
    assert.equal(portAsText.parse("8", {}), "8");
    assert.equal(anyLevel.parse("loud", {}), "loud");
    assert.equal(missingToken.parse("", {}), undefined);
    assert.equal(unknown.key, "colour");
  });

  it("loadConfig returns a value for every setting, of its parser's type", () => {
    const config = loadConfig({ RUNPLANE_DATA_DIR: "/nonexistent/runplane" });
    for (const setting of SETTINGS) assert.ok(setting.key in config, setting.key);
    assert.equal(typeof config.port, "number");
    assert.equal(config.metricsToken, null);
  });
});
