/**
 * A newcomer's first start (issue 51): a start that cannot bind its port, then one that can, still shows a
 * usable token, or exactly how to mint one (`runplane token create`); a missing apps folder is warned of.
 * Real processes: the server, the CLI, a socket holding the port.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { describe, it } from "node:test";
import { runCli } from "../_helpers/cli.ts";
import { createTestClient } from "../_helpers/client.ts";
import { createTestDatabase, engines, TEST_MASTER_KEY } from "../_helpers/postgres.ts";
import { waitFor } from "../_helpers/apps.ts";
import { makeServerDirs, PROCESS_PROJECT, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";

/** A socket listening on a free port of 127.0.0.1, which a server started on that port cannot bind. */
async function takenPort(): Promise<{ port: number; server: Server }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: (server.address() as { port: number }).port, server };
}

/** Whether `token` is accepted by the server at `url` for the demo project's REST API (200, contract-checked). */
async function accepted(url: string, token: string): Promise<boolean> {
  const { response } = await createTestClient(url, token).GET("/v3/projects/{project_id}/apps", {
    params: { path: { project_id: PROCESS_PROJECT } },
  });
  return response.status === 200;
}

const TOKEN_COMMAND = /runplane (token create [^\n]*?--project \S+)/;

/** The `runplane token create …` command the server's banner names (printed once it listens), as arguments. */
async function tokenCommandIn(server: ServerProcess): Promise<string[]> {
  await waitFor(() => TOKEN_COMMAND.test(server.banner()), "the banner naming runplane token create", 60_000);
  return TOKEN_COMMAND.exec(server.banner())![1].split(" ");
}

describe("the first start", { timeout: 300_000 }, async () => {
  for (const engine of await engines()) {
    it(`${engine}: a start with the port taken, then one with it free: a usable token, or the way to one`, async () => {
      const dirs = await makeServerDirs("runplane-first-start-");
      const database = engine === "postgres" ? await createTestDatabase() : undefined;
      const env: Record<string, string> = { ...dirs.env, ...(database ? { RUNPLANE_DATABASE_URL: database.url } : {}) };
      const taken = await takenPort();
      try {
        await assert.rejects(
          startServerProcess({ ...env, PORT: String(taken.port) }),
          /cannot listen on 127\.0\.0\.1:\d+/,
        );
        assert.ok(existsSync(dirs.dataDir), "the failed start made the data dir");
        taken.server.close();
        const second = await startServerProcess(env, engine === "postgres" ? { token: "none-printed" } : {});
        try {
          let token = second.token;
          if (engine === "sqlite") {
            // No token was ever minted on this data dir: this start shows the demo token.
            assert.match(second.banner(), /export RUNPLANE_TOKEN=/);
          } else {
            // The failed start created the shared schema: this one names the command that mints a token.
            const args = await tokenCommandIn(second);
            const urlAt = args.indexOf("--database-url");
            args.splice(urlAt, 2, "--database-url", database!.url);
            const minted = await runCli(args.filter((arg) => !/^\(|^RUNPLANE_MASTER_KEY|^set\)$/.test(arg)), {
              env: { RUNPLANE_MASTER_KEY: TEST_MASTER_KEY },
            });
            assert.equal(minted.code, 0, minted.stderr);
            token = minted.stdout.trim();
          }
          assert.ok(await accepted(second.url, token), "the token is accepted");
        } finally {
          await second.kill();
        }
        // A later start (the token lost): the banner says which command mints one, and it works.
        const third = await startServerProcess(env, { token: "lost" });
        try {
          const args = await tokenCommandIn(third);
          assert.doesNotMatch(third.banner(), /export RUNPLANE_TOKEN=/);
          if (database) args.splice(args.indexOf("--database-url"), 2, "--database-url", database.url);
          const minted = await runCli(args.filter((arg) => !/^\(|^RUNPLANE_MASTER_KEY|^set\)$/.test(arg)), {
            env: database ? { RUNPLANE_MASTER_KEY: TEST_MASTER_KEY } : {},
          });
          assert.equal(minted.code, 0, minted.stderr);
          assert.ok(await accepted(third.url, minted.stdout.trim()), "the minted token is accepted");
        } finally {
          await third.kill();
        }
      } finally {
        taken.server.close();
        await database?.drop();
        await dirs.remove();
      }
    });
  }

  it("token create refuses a data dir that does not exist, and mints nothing there", async () => {
    const dirs = await makeServerDirs("runplane-token-create-");
    try {
      const missing = join(dirs.root, "nowhere");
      const outcome = await runCli(["token", "create", "--data-dir", missing]);
      assert.equal(outcome.code, 2);
      assert.match(outcome.stderr, /found no data dir at .*nowhere and creates none/);
      assert.equal(outcome.stdout, "");
      assert.ok(!existsSync(missing));
    } finally {
      await dirs.remove();
    }
  });

  it("warns at start when the apps folder does not exist, naming it and the working directory", async () => {
    const dirs = await makeServerDirs("runplane-apps-missing-");
    try {
      const missing = join(dirs.root, "no-apps-here");
      const server = await startServerProcess({ ...dirs.env, RUNPLANE_APPS_DIR: missing });
      try {
        await waitFor(() => /apps folder/.test(server.stderr()), "the warning", 60_000);
        assert.match(server.stderr(), /warning: the apps folder .*no-apps-here does not exist/);
        assert.match(server.stderr(), /relative to the working directory/);
      } finally {
        await server.kill();
      }
      const present = await startServerProcess(dirs.env, { token: "kept" });
      try {
        // Printed after the warning would have been.
        await tokenCommandIn(present);
        assert.doesNotMatch(present.stderr(), /apps folder/);
      } finally {
        await present.kill();
      }
    } finally {
      await dirs.remove();
    }
  });
});
