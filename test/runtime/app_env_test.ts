/**
 * The names an app's `[env]` may not set (issue 43): the platform's own, and every name a program reads
 * before its code runs (the dynamic loader's, the C library's, a shell's, an interpreter's), which would
 * reach the root processes that start the app's jail, and a locale variable's value holding `/`, which the C
 * library there would open as a path. Each is refused when runplane.toml loads and when a deployment's
 * runplane.toml is checked over the REST API, with a message naming the variable and why.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { AppConfigError, parseAppConfig } from "../../server/runtime/mod.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { bundleOf } from "../_helpers/deployments.ts";
import {
  ALLOWED_ENV_NAMES,
  ALLOWED_ENV_VALUES,
  REFUSED_ENV_NAMES,
  REFUSED_ENV_VALUES,
} from "../_helpers/refused_env_names.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

type Problem = { type: string; status: number; detail: string; errors?: Array<{ path: string; message: string }> };

/** The load error of a runplane.toml whose `[env]` sets `name` (to `value`). */
function loadError(name: string, value = "x"): string {
  try {
    parseAppConfig(`[env]\n${name} = ${JSON.stringify(value)}\n`, "/apps/p/a");
  } catch (error) {
    assert.ok(error instanceof AppConfigError, String(error));
    return error.message;
  }
  assert.fail(`[env] ${name} was accepted`);
}

/** The part of `message` after `env.NAME `, failing when the message does not start by naming it. */
function reasonFor(name: string, message: string): string {
  const lead = `env.${name} `;
  assert.ok(message.startsWith(lead), `${name}: ${message}`);
  return message.slice(lead.length);
}

describe("[env] names that act before the privilege drop", () => {
  it("refuses every one when runplane.toml loads, naming the variable and who reads it", () => {
    for (const { name, why } of REFUSED_ENV_NAMES) {
      assert.match(reasonFor(name, loadError(name)), why, name);
    }
  });

  it("keeps allowing names that act only in the app's own process", () => {
    for (const name of ALLOWED_ENV_NAMES) {
      assert.deepEqual(parseAppConfig(`[env]\n${name} = "x"\n`, "/apps/p/a").env, { [name]: "x" }, name);
    }
  });

  it("refuses a locale variable whose value holds /, naming the variable and why", () => {
    for (const { name, value, why } of REFUSED_ENV_VALUES) {
      assert.match(reasonFor(name, loadError(name, value)), why, name);
    }
  });

  it("keeps loading locale variables set to locale names", () => {
    assert.deepEqual(parseAppConfig(`[env]\nLANG = "C.UTF-8"\n`, "/apps/p/a").env, { LANG: "C.UTF-8" });
    const lines = Object.entries(ALLOWED_ENV_VALUES).map(([name, value]) => `${name} = ${JSON.stringify(value)}\n`);
    assert.deepEqual(parseAppConfig(`[env]\n${lines.join("")}`, "/apps/p/a").env, ALLOWED_ENV_VALUES);
  });

  describe("in a deployment over the REST API", () => {
    let t: TestServer;
    let token: string;

    before(async () => {
      t = await startTestServer();
      token = (await t.mintToken({ scopes: ["deploy", "rest"] })).token;
    });
    after(() => t?.close());

    async function deploy(appId: string, env: string): Promise<Response> {
      const bundle = await bundleOf({
        "runplane.toml": `[deployment]\nname = "${appId}"\n\n[env]\n${env}`,
        "main.py": "def run():\n    return {}\n",
      });
      return await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/${appId}/deployments`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/gzip" },
        body: new Uint8Array(bundle),
      });
    }

    it("refuses every one with a 400 naming the variable and why, storing nothing", async () => {
      for (const [index, { name, why }] of REFUSED_ENV_NAMES.entries()) {
        const response = await deploy(`refused-${index}`, `${name} = "x"\n`);
        const problem = (await response.json()) as Problem;
        assert.equal(response.status, 400, `${name}: ${JSON.stringify(problem)}`);
        assert.equal(problem.type, "https://runplane.dev/problems/validation", name);
        assert.equal(problem.errors?.[0]?.path, "body.runplane.toml", name);
        const at = problem.detail.indexOf(`env.${name} `);
        assert.ok(at >= 0, `${name}: ${problem.detail}`);
        assert.match(reasonFor(name, problem.detail.slice(at)), why, name);
      }
      const listed = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/refused-0/deployments`, {
        headers: { Authorization: `Bearer ${token}` },
      });
      assert.equal(listed.status, 404, "no deployment was stored");
    });

    it("refuses a locale variable whose value holds / with a 400 naming the variable and why", async () => {
      for (const [index, { name, value, why }] of REFUSED_ENV_VALUES.entries()) {
        const response = await deploy(`locale-${index}`, `${name} = ${JSON.stringify(value)}\n`);
        const problem = (await response.json()) as Problem;
        assert.equal(response.status, 400, `${name}: ${JSON.stringify(problem)}`);
        assert.equal(problem.type, "https://runplane.dev/problems/validation", name);
        assert.equal(problem.errors?.[0]?.path, "body.runplane.toml", name);
        const at = problem.detail.indexOf(`env.${name} `);
        assert.ok(at >= 0, `${name}: ${problem.detail}`);
        assert.match(reasonFor(name, problem.detail.slice(at)), why, name);
      }
    });
  });
});
