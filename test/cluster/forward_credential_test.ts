import assert from "node:assert/strict";
import { inspect } from "node:util";
import { describe, it } from "node:test";
import { forwardKey, signForward, verifyForward } from "../../server/cluster/mod.ts";
import { parseMasterKey } from "../../server/keys/mod.ts";

const MASTER = parseMasterKey(Buffer.alloc(32, 1).toString("base64"));
const CALL = { runId: "run_01", projectId: "p-test", appId: "app", functionName: "fn" };
const AT = 1_700_000_000_000;

describe("the forwarded call's credential", () => {
  const key = forwardKey(MASTER);

  it("is v1, the time it was signed and a lowercase hex HMAC-SHA256", () => {
    assert.match(signForward(key, { ...CALL, at: AT }), /^v1,1700000000000,[0-9a-f]{64}$/);
  });

  it("verifies for the call it was signed for, within the skew either way", () => {
    const header = signForward(key, { ...CALL, at: AT });
    assert.equal(verifyForward(key, header, CALL, { now: AT }), true);
    assert.equal(verifyForward(key, header, CALL, { now: AT + 300_000 }), true);
    assert.equal(verifyForward(key, header, CALL, { now: AT - 300_000 }), true);
    assert.equal(verifyForward(key, header, CALL, { now: AT + 300_001 }), false);
    assert.equal(verifyForward(key, header, CALL, { now: AT + 5_000, skewMs: 1_000 }), false);
  });

  it("does not verify for another run, project, app or function", () => {
    const header = signForward(key, { ...CALL, at: AT });
    for (const field of ["runId", "projectId", "appId", "functionName"] as const) {
      assert.equal(verifyForward(key, header, { ...CALL, [field]: `${CALL[field]}x` }, { now: AT }), false, field);
    }
  });

  it("keeps fields apart: moving text from one field to the next changes the MAC", () => {
    const a = signForward(key, { ...CALL, appId: "a.b", functionName: "c", at: AT });
    const b = signForward(key, { ...CALL, appId: "a", functionName: "b.c", at: AT });
    assert.notEqual(a, b);
  });

  it("does not verify with a key derived from another master key, or with a changed time", () => {
    const other = forwardKey(parseMasterKey(Buffer.alloc(32, 2).toString("base64")));
    assert.equal(verifyForward(other, signForward(key, { ...CALL, at: AT }), CALL, { now: AT }), false);
    const mac = signForward(key, { ...CALL, at: AT }).split(",")[2];
    assert.equal(verifyForward(key, `v1,${AT + 1},${mac}`, CALL, { now: AT }), false);
  });

  it("is false, never an exception, for a missing or malformed header", () => {
    const mac = signForward(key, { ...CALL, at: AT }).split(",")[2];
    for (
      const header of [
        undefined,
        null,
        "",
        "v1",
        `v2,${AT},${mac}`,
        `v1,${AT},${mac.slice(2)}`,
        `v1,${AT},${mac.toUpperCase()}`,
        `v1,x,${mac}`,
        `v1,${AT},${mac},`,
      ]
    ) {
      assert.equal(verifyForward(key, header, CALL, { now: AT }), false, String(header));
    }
  });

  it("is derived the same way by every process, and hidden from logs", () => {
    assert.equal(signForward(forwardKey(MASTER), { ...CALL, at: AT }), signForward(key, { ...CALL, at: AT }));
    assert.equal(JSON.stringify({ key }), '{"key":"[redacted]"}');
    assert.equal(inspect(key), "ForwardKey [redacted]");
    assert.equal(String(key), "[redacted]");
  });
});
