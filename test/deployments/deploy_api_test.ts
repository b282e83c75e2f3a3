import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { pack } from "tar-stream";
import { deployApp } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { bundleOf } from "../_helpers/deployments.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

type Deployment = { deployment_id: string; status: string; active: boolean; digest: string; error: string | null };

/** A gzip tarball of `entries` as given, hostile ones included. */
async function rawBundle(entries: Array<{ name: string; text?: string; type?: "symlink"; linkname?: string }>) {
  const tar = pack();
  for (const entry of entries) {
    if (entry.type === "symlink") tar.entry({ name: entry.name, type: "symlink", linkname: entry.linkname });
    else tar.entry({ name: entry.name }, entry.text ?? "");
  }
  tar.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of tar) chunks.push(chunk as Buffer);
  return new Uint8Array(gzipSync(Buffer.concat(chunks)));
}

function app(version: string, extra: { toml?: string } = {}): Record<string, string> {
  return {
    "runplane.toml": `[deployment]\nname = "hello"\n\n[scaling]\nmax_replicas = 2\n${extra.toml ?? ""}`,
    "main.py": `import time\n\ndef run(seconds=0):\n    time.sleep(seconds)\n    return {"v": "${version}"}\n`,
  };
}

for (const engine of await engines()) {
  describe(`deployments over the REST API (${engine})`, () => {
    let t: TestServer;
    let deployToken: string;
    const base = (appId: string) => `/v3/projects/${TEST_PROJECT}/apps/${appId}`;

    before(async () => {
      t = await startTestServer({ engine, env: { RUNPLANE_BUNDLE_LIMIT: "64kb" } });
      deployToken = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
    });
    after(() => t?.close());

    async function request(path: string, init: RequestInit & { token?: string } = {}): Promise<Response> {
      return await checkedFetch(`${t.url}${path}`, {
        ...init,
        headers: { Authorization: `Bearer ${init.token ?? deployToken}`, ...init.headers },
      });
    }

    async function deploy(appId: string, bundle: Uint8Array, token?: string): Promise<Response> {
      return await request(`${base(appId)}/deployments`, {
        method: "POST",
        token,
        headers: { "Content-Type": "application/gzip" },
        body: new Uint8Array(bundle),
      });
    }

    /** Follows the build log over SSE to its end; returns the lines and the final deployment. */
    async function follow(appId: string, id: string): Promise<{ lines: string[]; end: Deployment }> {
      const response = await request(`${base(appId)}/deployments/${id}/logs`, {
        headers: { Accept: "text/event-stream" },
      });
      assert.equal(response.status, 200);
      const text = await response.text();
      const lines: string[] = [];
      let end: Deployment | undefined;
      for (const block of text.split("\n\n")) {
        const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (block.includes("event: end")) end = JSON.parse(data) as Deployment;
        else if (block.startsWith("data: ")) lines.push(data);
      }
      assert.ok(end, `the stream ended with the deployment: ${text}`);
      return { lines, end };
    }

    async function deployAndWait(appId: string, files: Record<string, string>) {
      const response = await deploy(appId, await bundleOf(files));
      assert.equal(response.status, 202, await response.clone().text());
      const accepted = (await response.json()) as Deployment;
      assert.equal(response.headers.get("location"), `${base(appId)}/deployments/${accepted.deployment_id}`);
      return { accepted, ...(await follow(appId, accepted.deployment_id)) };
    }

    async function call(appId: string, body: Record<string, unknown> = {}): Promise<Response> {
      return await request(`/v4/${TEST_PROJECT}/${appId}/run`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    }

    async function version(appId: string): Promise<string> {
      const response = await call(appId);
      assert.equal(response.status, 200, await response.clone().text());
      return ((await response.json()) as { result: { v: string } }).result.v;
    }

    it("deploys a new app, serves it, and lists it as a deployed app", async () => {
      const { accepted, end, lines } = await deployAndWait("hello", app("1"));
      assert.equal(accepted.status, "queued");
      assert.equal(end.status, "ready", end.error ?? "");
      assert.equal(end.active, true);
      assert.ok(lines.some((l) => l.startsWith("==> ready")), lines.join("\n"));
      assert.equal(await version("hello"), "1");
      const apps = await (await request(`/v3/projects/${TEST_PROJECT}/apps`)).json() as {
        apps: Array<{ app_id: string; source: string; state: string; runtime: string; active_deployment_id: string }>;
      };
      const hello = apps.apps.find((a) => a.app_id === "hello");
      assert.deepEqual(
        hello
          && { source: hello.source, state: hello.state, runtime: hello.runtime, active: hello.active_deployment_id },
        { source: "deployment", state: "ready", runtime: "python", active: accepted.deployment_id },
      );
    });

    it("lets a call in flight finish on the old code while the next call gets the new, then rolls back", async () => {
      const first = await deployAndWait("roll", app("1"));
      assert.equal(first.end.status, "ready");
      const inFlight = call("roll", { seconds: 3 });
      await new Promise((resolve) => setTimeout(resolve, 500));
      const second = await deployAndWait("roll", app("2"));
      assert.equal(second.end.status, "ready");
      assert.equal(await version("roll"), "2");
      const slow = await inFlight;
      assert.equal(((await slow.json()) as { result: { v: string } }).result.v, "1");
      const activated = await request(`${base("roll")}/deployments/${first.accepted.deployment_id}/activate`, {
        method: "POST",
      });
      assert.equal(activated.status, 200);
      assert.equal(((await activated.json()) as Deployment).active, true);
      assert.equal(await version("roll"), "1");
      const page = await (await request(`${base("roll")}/deployments?limit=1`)).json() as {
        deployments: Deployment[];
        next_cursor: string | null;
      };
      assert.equal(page.deployments[0].deployment_id, second.accepted.deployment_id);
      assert.ok(page.next_cursor);
      const next = await (await request(`${base("roll")}/deployments?limit=1&cursor=${page.next_cursor}`)).json() as {
        deployments: Deployment[];
      };
      assert.equal(next.deployments[0].deployment_id, first.accepted.deployment_id);
      assert.equal(next.deployments[0].active, true);
    });

    it("keeps the previous deployment serving when a build fails, and says why", async () => {
      assert.equal((await deployAndWait("keep", app("1"))).end.status, "ready");
      const failing = await deployAndWait("keep", app("2", { toml: `\n[build]\nshell_commands = ["exit 3"]\n` }));
      assert.equal(failing.end.status, "failed");
      assert.match(failing.end.error ?? "", /exit 3/);
      assert.ok(failing.lines.some((l) => l.startsWith("==> failed")), failing.lines.join("\n"));
      assert.equal(await version("keep"), "1");
      const activate = await request(`${base("keep")}/deployments/${failing.accepted.deployment_id}/activate`, {
        method: "POST",
      });
      assert.equal(activate.status, 409);
      const plain = await request(`${base("keep")}/deployments/${failing.accepted.deployment_id}/logs`);
      assert.equal(plain.headers.get("content-type")?.split(";")[0], "text/plain");
      assert.match(await plain.text(), /==> failed/);
    });

    it("builds from the upload's own checked unpacking on this host, and from the store when none is kept", async () => {
      const bytes = await bundleOf(app("twice"));
      const here = await deployAndWait("twice-a", app("twice"));
      assert.equal(here.end.status, "ready", here.end.error ?? "");
      assert.match(here.lines.join("\n"), /==> bundle sha256:[0-9a-f]+: unpacked here when it was uploaded/);
      assert.deepEqual(readdirSync(join(t.dataDir, "unpacked")), [], "no kept unpacking is left once built");
      // Where nothing can be kept (a file in the way, as if another host had the upload), the store's bundle
      // is unpacked, and the upload is accepted all the same.
      const kept = join(t.dataDir, "unpacked");
      rmSync(kept, { recursive: true });
      writeFileSync(kept, "in the way");
      try {
        const response = await deploy("twice-b", bytes);
        assert.equal(response.status, 202, await response.clone().text());
        const there = await follow("twice-b", ((await response.json()) as Deployment).deployment_id);
        assert.equal(there.end.status, "ready", there.end.error ?? "");
        assert.match(there.lines.join("\n"), /==> bundle sha256:[0-9a-f]+: 2 files/);
      } finally {
        rmSync(kept);
      }
      assert.equal(await version("twice-a"), "twice");
      assert.equal(await version("twice-b"), "twice");
      assert.deepEqual(readdirSync(join(t.dataDir, "uploads")), []);
    });

    it("refuses a runplane.toml that does not load before building anything, naming the key", async () => {
      const response = await deploy(
        "badtoml",
        await bundleOf({ ...app("1"), "runplane.toml": "[scaling]\nmax_replicas = 0\n" }),
      );
      assert.equal(response.status, 400);
      const problem = (await response.json()) as { detail: string };
      assert.match(problem.detail, /scaling\.max_replicas/);
      const listed = await request(`${base("badtoml")}/deployments`);
      assert.equal(listed.status, 404);
    });

    it("refuses hostile bundles with 400 and writes nothing outside the data dir's scratch folder", async () => {
      const files = app("1");
      const good = Object.entries(files).map(([name, text]) => ({ name, text }));
      const cases = [
        [...good, { name: "../escaped.txt", text: "x" }],
        [...good, { name: "/tmp/runplane-absolute-escape.txt", text: "x" }],
        [...good, { name: "etc", type: "symlink" as const, linkname: "/etc" }],
      ];
      for (const entries of cases) {
        const response = await deploy("hostile", await rawBundle(entries));
        assert.equal(response.status, 400, `${entries.at(-1)!.name}: ${await response.clone().text()}`);
      }
      assert.equal(existsSync(join(t.dataDir, "..", "escaped.txt")), false);
      assert.equal(existsSync(join(t.dataDir, "escaped.txt")), false);
      assert.equal(existsSync("/tmp/runplane-absolute-escape.txt"), false);
      assert.deepEqual(readdirSync(join(t.dataDir, "uploads")), []);
    });

    it("refuses an entry whose name or path is too long for the file system with 400, naming it", async () => {
      const good = Object.entries(app("1")).map(([name, text]) => ({ name, text }));
      const component = `${"n".repeat(300)}.py`;
      const deep = `${"d".repeat(100)}/`.repeat(45) + "deep.py"; // 4,552 bytes: past PATH_MAX
      for (const [name, reason] of [[component, /at most 255 bytes/], [deep, /at most 3072 bytes/]] as const) {
        const response = await deploy("long-names", await rawBundle([...good, { name, text: "x" }]));
        const text = await response.text();
        assert.equal(response.status, 400, text);
        const problem = JSON.parse(text) as { detail: string; errors: Array<{ path: string }> };
        assert.ok(problem.detail.includes(`${name}: `), `the entry is named: ${problem.detail.slice(0, 200)}`);
        assert.match(problem.detail, reason);
        assert.equal(problem.errors[0].path, "body");
      }
      assert.deepEqual(readdirSync(join(t.dataDir, "uploads")), []);
    });

    it("refuses a bundle over RUNPLANE_BUNDLE_LIMIT with 413", async () => {
      const big = new Uint8Array(100 * 1024).map((_, i) => (i * 7919) % 251);
      const response = await deploy("big", big);
      assert.equal(response.status, 413);
    });

    it("stores equal bundles once", async () => {
      const bytes = await bundleOf(app("same"));
      const a = (await (await deploy("same-a", bytes)).json()) as Deployment;
      const b = (await (await deploy("same-b", bytes)).json()) as Deployment;
      assert.equal(a.digest, b.digest);
      const rows = await t.server.context.store.db.selectFrom("bundles").select("digest").where("digest", "=", a.digest)
        .execute();
      assert.equal(rows.length, 1);
      // SQLite keeps the bytes as a file of the data dir (the upload linked into place, no rows written on
      // the event loop); PostgreSQL in rows, which every host reads.
      const chunks = await t.server.context.store.db.selectFrom("bundle_chunks").select("idx")
        .where("digest", "=", a.digest).execute();
      const file = join(t.dataDir, "bundles", a.digest.replace("sha256:", ""));
      if (engine === "sqlite") {
        assert.equal(chunks.length, 0);
        assert.deepEqual(readFileSync(file), Buffer.from(bytes));
      } else {
        assert.ok(chunks.length > 0);
        assert.equal(existsSync(file), false);
      }
    });

    it("needs the deploy scope to deploy, activate and delete; rest reads", async () => {
      const rest = (await t.mintToken({ scopes: ["rest", "run"] })).token;
      const response = await deploy("scoped", await bundleOf(app("1")), rest);
      assert.equal(response.status, 403);
      const apps = await request(`/v3/projects/${TEST_PROJECT}/apps`, { token: rest });
      assert.equal(apps.status, 200);
      const deleted = await request(base("hello"), { method: "DELETE", token: rest });
      assert.equal(deleted.status, 403);
    });

    it("refuses to deploy over an app of the apps folder with 409, and lists folder apps", async () => {
      await deployApp(t, "folder", {
        toml: `[deployment]\nname = "folder"\n`,
        files: { "main.py": "def run():\n    return 1\n" },
      });
      const response = await deploy("folder", await bundleOf(app("1")));
      assert.equal(response.status, 409);
      assert.match(((await response.json()) as { detail: string }).detail, /apps folder/);
      const apps = await (await request(`/v3/projects/${TEST_PROJECT}/apps`)).json() as {
        apps: Array<{ app_id: string; source: string }>;
      };
      assert.equal(apps.apps.find((a) => a.app_id === "folder")?.source, "directory");
      const one = await (await request(base("folder"))).json() as { source: string; state: string };
      assert.deepEqual(one.source, "directory");
      assert.deepEqual(one.state, "ready");
    });

    it("deletes a deployed app: the next call is a 404", async () => {
      assert.equal((await deployAndWait("gone", app("1"))).end.status, "ready");
      assert.equal(await version("gone"), "1");
      const deleted = await request(base("gone"), { method: "DELETE" });
      assert.equal(deleted.status, 204);
      assert.equal((await call("gone")).status, 404);
      assert.equal((await request(base("gone"))).status, 404);
    });
  });
}
