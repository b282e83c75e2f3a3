/**
 * `runplane secrets` against a server: the value comes from stdin (piped) or from a prompt on a terminal
 * that does not echo it, never from a flag, and is never printed; list shows names, delete removes.
 */
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { HAS_SCRIPT, runCliOnTerminal, runMain } from "../_helpers/cli.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

describe("runplane secrets against a server", { timeout: 120_000 }, () => {
  let t: TestServer;
  let env: Record<string, string>;

  before(async () => {
    t = await startTestServer();
    const { token } = await t.mintToken({ scopes: ["deploy"] });
    env = { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: token };
  });
  after(() => t?.close());

  it("sets a secret from stdin, without the trailing newline, and never prints the value", async () => {
    const value = "piped s3cr3t value";
    const created = await runMain(["secrets", "set", TEST_PROJECT, "API_KEY"], {
      env,
      stdin: Readable.from([`${value}\n`]),
    });
    assert.equal(created.code, 0, created.stderr);
    assert.equal(created.stdout, `Created API_KEY of ${TEST_PROJECT}: its replicas are replaced to see it\n`);
    assert.equal((await t.server.context.projectSecrets.environment(TEST_PROJECT)).API_KEY, value);
    const replaced = await runMain(["secrets", "set", TEST_PROJECT, "API_KEY", "--json"], {
      env,
      stdin: Readable.from(["line one\nline two\n"]),
    });
    assert.equal(replaced.code, 0, replaced.stderr);
    const json = JSON.parse(replaced.stdout) as { name: string; created: boolean; updated_at: string };
    assert.equal(json.name, "API_KEY");
    assert.equal(json.created, false);
    assert.ok(!replaced.stdout.includes("line one"), "the value is not in the answer");
    assert.equal((await t.server.context.projectSecrets.environment(TEST_PROJECT)).API_KEY, "line one\nline two");
    for (const outcome of [created, replaced]) assert.ok(!`${outcome.stdout}${outcome.stderr}`.includes("s3cr3t"));
  });

  it("lists names and times, and deletes (then fails for a secret that is gone)", async () => {
    await runMain(["secrets", "set", TEST_PROJECT, "DB_URL"], { env, stdin: Readable.from(["postgres://x"]) });
    const listed = await runMain(["secrets", "list", TEST_PROJECT], { env });
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, /^NAME +CREATED +UPDATED\nAPI_KEY +\S+Z +\S+Z\nDB_URL +\S+Z +\S+Z\n$/);
    assert.ok(!listed.stdout.includes("postgres://x"));
    const json = await runMain(["secrets", "list", TEST_PROJECT, "--json"], { env });
    assert.deepEqual((JSON.parse(json.stdout) as { secrets: Array<{ name: string }> }).secrets.map((s) => s.name), [
      "API_KEY",
      "DB_URL",
    ]);
    const unconfirmed = await runMain(["secrets", "delete", TEST_PROJECT, "DB_URL"], { env, stdin: Readable.from([]) });
    assert.equal(unconfirmed.code, 2);
    assert.match(unconfirmed.stderr, /Not deleting the secret DB_URL without a confirmation: .*pass --yes/);
    const deleted = await runMain(["secrets", "delete", TEST_PROJECT, "DB_URL", "--yes"], { env });
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.equal(deleted.stdout, `Deleted DB_URL of ${TEST_PROJECT}: its replicas are replaced without it\n`);
    const again = await runMain(["secrets", "delete", TEST_PROJECT, "DB_URL", "-y"], { env });
    assert.equal(again.code, 1);
    assert.match(again.stderr, /has no secret DB_URL/);
    assert.deepEqual(Object.keys(await t.server.context.projectSecrets.environment(TEST_PROJECT)), ["API_KEY"]);
  });

  it("takes no value as a flag, and says what is wrong with a name, a project or a token", async () => {
    const flag = await runMain(["secrets", "set", TEST_PROJECT, "X", "--value", "oops"], { env });
    assert.equal(flag.code, 2);
    assert.match(flag.stderr, /never a flag/);
    const missing = await runMain(["secrets", "set", TEST_PROJECT], { env });
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /needs \[<project>\] NAME/);
    const badName = await runMain(["secrets", "set", TEST_PROJECT, "RUNPLANE_X"], { env, stdin: Readable.from(["v"]) });
    assert.equal(badName.code, 1);
    assert.match(badName.stderr, /RUNPLANE_, which the platform's own variables use/);
    const { token } = await t.mintToken({ scopes: ["rest", "run"] });
    const denied = await runMain(["secrets", "list", TEST_PROJECT, "--token", token], { env });
    assert.equal(denied.code, 1);
    assert.match(denied.stderr, /lacks the "deploy" scope/);
  });

  it("refuses an empty value (empty stdin, or only a newline), and sets nothing", async () => {
    for (const piped of [[], ["\n"], [""]]) {
      const outcome = await runMain(["secrets", "set", TEST_PROJECT, "EMPTY_ONE"], {
        env,
        stdin: Readable.from(piped),
      });
      assert.equal(outcome.code, 1, JSON.stringify(piped));
      assert.match(outcome.stderr, /The value of EMPTY_ONE on stdin is empty: nothing was set/);
    }
    assert.ok(!("EMPTY_ONE" in (await t.server.context.projectSecrets.environment(TEST_PROJECT))));
  });

  it("defaults the project to the token's; another project named is refused (403)", async () => {
    const set = await runMain(["secrets", "set", "FROM_TOKEN"], { env, stdin: Readable.from(["v1"]) });
    assert.equal(set.code, 0, set.stderr);
    assert.equal(set.stdout, `Created FROM_TOKEN of ${TEST_PROJECT}: its replicas are replaced to see it\n`);
    assert.equal((await t.server.context.projectSecrets.environment(TEST_PROJECT)).FROM_TOKEN, "v1");
    const listed = await runMain(["secrets", "list"], { env });
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, /^FROM_TOKEN /m);
    const deleted = await runMain(["secrets", "delete", "FROM_TOKEN", "--yes"], { env });
    assert.equal(deleted.code, 0, deleted.stderr);
    const other = await runMain(["secrets", "list", "p-other"], { env });
    assert.equal(other.code, 1);
    assert.match(other.stderr, /403|another project|not .*p-other|belongs to/i);
    const tokenless = await runMain(["secrets", "list"], { env: { RUNPLANE_BASE_URL: t.url } });
    assert.equal(tokenless.code, 2);
    assert.match(tokenless.stderr, /needs a project .*, or a token/);
  });

  it("asks for the value on a terminal without echoing it", {
    skip: !HAS_SCRIPT && "needs util-linux script for a pseudo-terminal",
  }, async () => {
    const typed = "typed-at-the-prompt";
    // Typed once the prompt shows: the terminal has stopped echoing by then.
    const outcome = await runCliOnTerminal(["secrets", "set", TEST_PROJECT, "PROMPTED"], env, {
      waitFor: /Value of PROMPTED \(not shown\): /,
      typed: `${typed}\r`,
    });
    assert.equal(outcome.code, 0, outcome.output);
    assert.match(outcome.output, /Created PROMPTED of p-test/);
    assert.ok(!outcome.output.includes(typed), `the terminal showed the value:\n${outcome.output}`);
    assert.equal((await t.server.context.projectSecrets.environment(TEST_PROJECT)).PROMPTED, typed);
  });
});
