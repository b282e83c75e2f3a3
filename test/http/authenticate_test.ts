/**
 * The `Authorization` header of a call, with real tokens of a real store: a client sends the same header
 * call after call (the last header's token is reused), and whatever came before, a malformed header is
 * refused and each token is checked as its own.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { routes } from "../../generated/routes.ts";
import { createServiceAccount, createTokenVerifier, type TokenVerifier } from "../../server/auth/mod.ts";
import { authenticate } from "../../server/http/authenticate.ts";
import { keysBootstrap, loadKeys } from "../../server/keys/mod.ts";
import { isProblemError } from "../../server/problems/mod.ts";
import { openTestStore, type TestStore } from "../_helpers/postgres.ts";

const RUN = routes.find((route) => route.operationId === "runFunction")!;

describe("authenticate", () => {
  let t: TestStore;
  let verifier: TokenVerifier;
  const tokens: Record<string, string> = {};
  before(async () => {
    t = await openTestStore("sqlite", { bootstrap: keysBootstrap(null) });
    const keys = await loadKeys(t.store, { dataDir: t.dataDir, masterKey: null });
    verifier = createTokenVerifier({ db: t.store.db, keys: keys.signing });
    for (const projectId of ["p-one", "p-two"]) {
      const { token } = await createServiceAccount({ db: t.store.db, key: keys.signing.current }, {
        projectId,
        name: "caller",
        scopes: ["run"],
        expiresAt: Date.now() + 3_600_000,
      });
      tokens[projectId] = token;
    }
  });
  after(async () => await t.close());

  async function refusal(authorization: string | undefined, projectId: string): Promise<string> {
    try {
      await authenticate(verifier, { route: RUN, authorization, projectId });
    } catch (error) {
      assert.ok(isProblemError(error));
      return `${error.status} ${error.message}`;
    }
    return "let through";
  }

  it("lets the same header through call after call, each time for its own token", async () => {
    for (let i = 0; i < 3; i++) {
      for (const projectId of ["p-one", "p-one", "p-two"]) {
        const principal = await authenticate(verifier, {
          route: RUN,
          authorization: `Bearer ${tokens[projectId]}`,
          projectId,
        });
        assert.equal(principal.projectId, projectId);
      }
    }
  });

  it("refuses a malformed header, a missing one and another project's token after a header it let through", async () => {
    const good = `Bearer ${tokens["p-one"]}`;
    await authenticate(verifier, { route: RUN, authorization: good, projectId: "p-one" });
    assert.match(await refusal(`${good}!`, "p-one"), /^401 The Authorization header must be/);
    assert.match(await refusal(`Basic ${tokens["p-one"]}`, "p-one"), /^401 The Authorization header must be/);
    assert.match(await refusal(undefined, "p-one"), /^401 Send a service-account token/);
    await authenticate(verifier, { route: RUN, authorization: good, projectId: "p-one" });
    assert.match(await refusal(good, "p-two"), /^403 This token belongs to project p-one/);
    assert.match(await refusal(`Bearer ${tokens["p-one"].slice(0, -2)}`, "p-one"), /^401 /);
  });
});
