import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { createRunplaneClient, isRunplaneError, type Run, type RunChange, RunplaneError } from "../../client/mod.ts";
import { mirrorRepository } from "../../server/integrations/mod.ts";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { blobSha, createFixtureRepo, type FixtureRepo } from "../_helpers/git_repos.ts";
import { contractCheckedFetch, createCheckedRunplaneClient } from "../_helpers/runplane_client.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const RUN_ID = "run_0123456789abcdefghijklmnop";
/** The Python app every test here calls (`p-test/py`). */
const MAIN = readFileSync(join(import.meta.dirname, "_fixtures", "client_app.py"), "utf8");

async function rejection(promise: Promise<unknown>): Promise<RunplaneError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(isRunplaneError(error), `expected a RunplaneError, got ${error}`);
    return error;
  }
  assert.fail("expected the call to fail");
}

describe("createRunplaneClient against a real server", { timeout: 180_000 }, () => {
  let t: TestServer;
  let dir: string;
  const app = `${TEST_PROJECT}/py`;
  before(async () => {
    // The functions write marker files the test reads back: a jailed app cannot (test/sandbox/ covers the jail).
    t = await startTestServer({ env: { RUNPLANE_SANDBOX: "off" } });
    dir = await deployApp(t, "py", {
      toml: "[scaling]\nmax_replicas = 2\nreplica_concurrency = 4\nresponse_grace_period = 60\n",
      files: { "main.py": MAIN },
    });
  });
  after(() => t.close());

  it("refuses to start without an address", () => {
    assert.throws(() => createRunplaneClient({ token: "x" }), /baseUrl.*apiUrl/);
  });

  it("run() resolves with a sync call's result, and getRun(runId) reads its record without the app", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const answer = await client.run(app, { name: "Ada" }, { idempotencyKey: "sync-1" });
    assert.deepEqual(answer.result, { message: "Hello, Ada!" });
    assert.match(answer.run_id, /^run_[0-9a-z]{26}$/);
    const record = await client.getRun(answer.run_id);
    assert.equal(record.status, "success");
    assert.equal(record.mode, "sync");
    assert.deepEqual(record.result, { message: "Hello, Ada!" });
    assert.deepEqual(await client.getRun({ project: TEST_PROJECT, app: "py" }, answer.run_id), record);
  });

  it("run() on a generator collects its items", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const answer = await client.run(`${app}/ticks`, { n: 2, pause: 0, done: join(dir, "collect.done") });
    assert.deepEqual(answer.result, [{ i: 0 }, { i: 1 }, "last tick"]);
    assert.equal((await client.getRun(answer.run_id)).status, "success");
  });

  it("runAsync() answers at once and waitForRun(runId) polls until the run is terminal", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const runId = await client.runAsync(`${app}/sleepy`, { seconds: 1.5 });
    assert.match(runId, /^run_[0-9a-z]{26}$/);
    const seen: Run["status"][] = [];
    const done = await client.waitForRun(runId, { initialDelayMs: 100, onPoll: (record) => seen.push(record.status) });
    assert.equal(done.status, "success");
    assert.equal(done.mode, "async");
    assert.equal(done.function_name, "sleepy");
    assert.deepEqual(done.result, { slept: 1.5 });
    assert.ok(seen.length >= 2 && ["queued", "running"].includes(seen[0]), `polls saw ${seen.join(", ")}`);
    assert.equal(seen.at(-1), "success");
  });

  it("waitForRun(app, runId) gives up after timeoutMs with a 504 RunplaneError", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const runId = await client.runAsync(`${app}/sleepy`, { seconds: 3 });
    const error = await rejection(client.waitForRun(app, runId, { timeoutMs: 300, initialDelayMs: 100 }));
    assert.equal(error.status, 504);
    assert.equal(error.runId, runId);
    assert.equal((await client.waitForRun(app, runId)).status, "success");
  });

  it("getRun(runId) of a run this client never saw says to pass the app", async () => {
    const starter = createCheckedRunplaneClient(t.url, t.token);
    const runId = await starter.runAsync(app, { name: "Bo" });
    const other = createCheckedRunplaneClient(t.url, t.token);
    await assert.rejects(other.getRun(runId), {
      name: "TypeError",
      message:
        `This client did not start run ${runId}, so it does not know its app: call getRun("<project>/<app>", "${runId}")`,
    });
    await assert.rejects(other.cancelRun(runId), /call cancelRun\(/);
    assert.equal((await other.waitForRun(app, runId)).status, "success");
  });

  it("listRuns() pages an app's runs newest first, filtered by status, and remembers their apps", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const ids = [];
    for (const name of ["one", "two", "three"]) ids.push((await client.run(app, { name })).run_id);
    const first = await client.listRuns(app, { status: "success", limit: 2 });
    assert.equal(first.runs.length, 2);
    assert.ok(first.runs.every((r) => r.status === "success" && r.app_id === "py"));
    assert.deepEqual(first.runs.map((r) => r.run_id), [ids[2], ids[1]]);
    assert.ok(first.next_cursor, "more success runs exist");
    const second = await client.listRuns(app, { status: "success", limit: 2, cursor: first.next_cursor! });
    assert.equal(second.runs[0].run_id, ids[0]);
    const fresh = createCheckedRunplaneClient(t.url, t.token);
    const page = await fresh.listRuns(app, { limit: 1 });
    assert.equal((await fresh.getRun(page.runs[0].run_id)).run_id, page.runs[0].run_id);
  });

  it("cancelRun(runId) cancels a running async run: it ends cancelled and the function never finishes", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const started = join(dir, "cancel.started");
    const finished = join(dir, "cancel.finished");
    const runId = await client.runAsync(`${app}/sleepy`, { seconds: 3, started, finished });
    await waitFor(() => existsSync(started), "the function to start", 30_000);
    const cancelled = await client.cancelRun(runId);
    assert.equal(cancelled.status, "cancelled");
    assert.ok(cancelled.completed_at);
    assert.equal((await client.waitForRun(runId)).status, "cancelled");
    const again = await rejection(client.cancelRun(runId));
    assert.equal(again.status, 409);
    await sleep(4_000);
    assert.equal(existsSync(finished), false, "the worker was stopped before the function returned");
    assert.equal((await client.getRun(runId)).status, "cancelled");
  });

  it("throws a 404 RunplaneError for an unknown app", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const error = await rejection(client.run(`${TEST_PROJECT}/no-such-app`, {}));
    assert.equal(error.status, 404);
    assert.equal(error.problem.type, "https://runplane.dev/problems/not-found");
    assert.match(error.problem.detail ?? "", /has no app named no-such-app/);
  });

  it("throws a 422 RunplaneError with Python's message for bad arguments", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const error = await rejection(client.run(`${app}/add`, { a: 1 }));
    assert.equal(error.status, 422);
    assert.match(error.problem.detail ?? "", /missing a required argument: 'b'/);
    assert.deepEqual((await client.run(`${app}/add`, { a: 1, b: 2 })).result, 3);
  });

  it("throws a 500 RunplaneError with the exception and traceback of a raising function", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const error = await rejection(client.run(`${app}/boom`));
    assert.equal(error.status, 500);
    assert.equal(error.problem.type, "https://runplane.dev/problems/function-error");
    assert.equal(error.problem.exception_type, "ValueError");
    assert.match(error.problem.traceback ?? "", /in boom\n[\s\S]*ValueError: bad value here/);
    assert.match(error.runId ?? "", /^run_[0-9a-z]{26}$/);
    const record = await client.getRun(error.runId!);
    assert.equal(record.status, "failure");
    assert.equal(record.error?.type, "ValueError");
  });

  it("stream() yields the first item while the generator is still running", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const done = join(dir, "ticks.done");
    const stream = client.stream(`${app}/ticks`, { n: 3, pause: 1, done });
    const items = stream[Symbol.asyncIterator]();
    assert.deepEqual(await items.next(), { done: false, value: { i: 0 } });
    assert.equal(existsSync(done), false, "the generator has not finished yet");
    assert.match(stream.runId ?? "", /^run_[0-9a-z]{26}$/);
    const rest = [];
    for (let item = await items.next(); !item.done; item = await items.next()) rest.push(item.value);
    assert.deepEqual(rest, [{ i: 1 }, { i: 2 }, "last tick"]);
    assert.equal(existsSync(done), true);
    assert.equal((await client.waitForRun(stream.runId!)).status, "success");
  });

  it("watchRuns() yields the project's run changes as typed records, and resync", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const controller = new AbortController();
    const events = client.watchRuns(TEST_PROJECT, { signal: controller.signal })[Symbol.asyncIterator]();
    // Once every process has heard of the stream, it says so with a resync: changes from then on arrive.
    assert.deepEqual((await events.next()).value, { resync: true });
    const { run_id: runId } = await client.run(app, { name: "Eve" });
    const statuses: RunChange["status"][] = [];
    for (let next = await events.next(); !next.done; next = await events.next()) {
      if (!("change" in next.value) || next.value.change.run_id !== runId) continue;
      const change: RunChange = next.value.change;
      assert.equal(change.app_id, "py");
      assert.equal(change.function_name, "run");
      assert.equal(Number.isNaN(Date.parse(change.at)), false);
      statuses.push(change.status);
      if (change.status === "success") break;
    }
    controller.abort();
    assert.deepEqual(statuses, ["running", "success"]);
  });

  it("aborting stream()'s signal closes the server-side generator", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const marker = join(dir, "endless.aborted");
    const controller = new AbortController();
    const items = client.stream(`${app}/endless`, { marker }, { signal: controller.signal })[Symbol.asyncIterator]();
    assert.deepEqual(await items.next(), { done: false, value: 0 });
    assert.equal(existsSync(marker), false);
    controller.abort();
    await assert.rejects(items.next(), { name: "AbortError" });
    await waitFor(() => existsSync(marker), "the generator's finally to run", 10_000);
  });

  it("breaking out of stream()'s loop closes the server-side generator", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const marker = join(dir, "endless.broken");
    const seen = [];
    for await (const item of client.stream(`${app}/endless`, { marker })) {
      seen.push(item);
      if (seen.length === 2) break;
    }
    assert.deepEqual(seen, [0, 1]);
    await waitFor(() => existsSync(marker), "the generator's finally to run", 10_000);
  });

  it("stream() throws the RunplaneError of an event: error after the items before it", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const stream = client.stream(`${app}/breaks`);
    const seen: unknown[] = [];
    const error = await rejection((async () => {
      for await (const item of stream) seen.push(item);
    })());
    assert.deepEqual(seen, ["ok"]);
    assert.equal(error.status, 500);
    assert.equal(error.problem.exception_type, "RuntimeError");
    assert.match(error.problem.traceback ?? "", /went wrong mid-stream/);
    assert.equal(error.runId, stream.runId);
  });

  it("stream() of a function that returns a plain value yields that value", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const items = [];
    for await (const item of client.stream(app, { name: "Cy" })) items.push(item);
    assert.deepEqual(items, [{ message: "Hello, Cy!" }]);
  });

  it("hashes base-image dependencies: new while pip has to run, cached when nothing is to install", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const request = {
      pipRequirements: ["requests==2.32.0"],
      shellCommands: [Buffer.from("echo hi").toString("base64")],
    };
    const first = await client.baseImageHash(`${TEST_PROJECT}/client-app`, request);
    const second = await client.baseImageHash({ project: TEST_PROJECT, app: "client-app" }, request);
    assert.match(first.digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(first.status, "new");
    assert.deepEqual(second, { digest: first.digest, status: "new" });
    const none = await client.baseImageHash(`${TEST_PROJECT}/client-app`, { aptPackages: ["curl"] });
    assert.equal(none.status, "cached");
  });

  it("throws a RunplaneError with the problem's field errors for a 400", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const error = await rejection(
      client.baseImageHash(`${TEST_PROJECT}/client-app`, { shellCommands: ["not base64!"] }),
    );
    assert.equal(error.status, 400);
    assert.deepEqual(error.problem.errors?.map((e) => e.path), ["body.shellCommands[0]"]);
    assert.match(error.requestId ?? "", /.+/);
    assert.equal(error.runId, undefined);
  });

  it("throws a 401 RunplaneError without a token", async () => {
    const client = createCheckedRunplaneClient(t.url);
    const error = await rejection(client.listRuns(app));
    assert.equal(error.status, 401);
    assert.equal(error.problem.status, 401);
    assert.match(error.message, /^Authentication required/);
  });

  it("throws a 403 RunplaneError for another project's app", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const error = await rejection(client.baseImageHash("someone-else/app", {}));
    assert.equal(error.status, 403);
  });

  it("rejects a malformed app reference before calling", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    await assert.rejects(client.run("just-a-project", {}), /Invalid app reference "just-a-project"/);
  });

  it("validates path parameters on the server: a bad run id is a 400, an unknown one a 404", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const bad = await rejection(client.getRun(app, "not-a-run-id"));
    assert.equal(bad.status, 400);
    assert.ok(bad.problem.errors?.some((e) => e.path === "path.run_id"));
    const unknown = await rejection(client.getRun(app, RUN_ID));
    assert.equal(unknown.status, 404);
  });

  it("reads the system operations: jwks, health, readiness and metrics", async () => {
    const client = createRunplaneClient({ baseUrl: t.url, fetch: contractCheckedFetch });
    const jwks = await client.jwks();
    assert.equal(jwks.keys[0].kty, "OKP");
    assert.deepEqual(await client.health(), { status: "ok" });
    // Readiness reports the sandbox this server runs with (off here, see `before`), its cgroups, GPUs and
    // volumes (none missing: no deployment mounts one).
    const { cgroups, gpus, volumes } = t.server.context;
    assert.deepEqual(await client.readiness(), {
      status: "ready",
      sandbox: { setting: "off", jailed: false, deployments: "accepted", warnings: t.server.context.sandbox.problems },
      cgroups: { setting: cgroups.setting, version: cgroups.version, warnings: cgroups.problems },
      gpus: { source: gpus.source, count: gpus.gpus.length, held: 0, warnings: gpus.problems },
      volumes: { mode: volumes.mode, unavailable: [] },
    });
    assert.match(await client.metrics(), /# TYPE /);
  });

  it("sends run calls to apiUrl and REST calls to baseUrl", async () => {
    const seen: string[] = [];
    const client = createRunplaneClient({
      apiUrl: `${t.url}/`,
      baseUrl: t.url.replace("127.0.0.1", "localhost"),
      token: t.token,
      fetch(request) {
        seen.push(new URL(request.url).host);
        return contractCheckedFetch(request);
      },
    });
    const { run_id } = await client.run(app, {});
    await client.getRun(run_id);
    const port = new URL(t.url).port;
    assert.deepEqual(seen, [`127.0.0.1:${port}`, `localhost:${port}`]);
  });
});

describe("repositoryTree against a real server and a mirrored git repository", { timeout: 120_000 }, () => {
  let t: TestServer;
  let work: string;
  let fixture: FixtureRepo;
  before(async () => {
    t = await startTestServer();
    work = await mkdtemp(join(tmpdir(), "runplane-client-repo-"));
    fixture = await createFixtureRepo(join(work, "widgets"));
    await mirrorRepository(fixture.path, {
      dataDir: t.dataDir,
      projectId: TEST_PROJECT,
      owner: "acme",
      repo: "widgets",
    });
  });
  after(async () => {
    await t.close();
    await rm(work, { recursive: true, force: true });
  });

  it("reads the default branch's tree, then answers notModified for its etag", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const answer = await client.repositoryTree(TEST_PROJECT, "acme/widgets");
    assert.equal(answer.notModified, false);
    if (answer.notModified) return;
    assert.equal(answer.tree.ref, "main");
    assert.equal(answer.tree.sha, fixture.main);
    const util = answer.tree.entries.find((e) => e.path === "src/lib/util.py");
    assert.deepEqual(util && { type: util.type, sha: util.sha }, {
      type: "file",
      sha: blobSha("def util():\n    return 42\n"),
    });
    assert.ok(answer.tree.entries.some((e) => e.path === "docs/guide.md"));
    assert.match(answer.etag, /^".+"$/);
    assert.deepEqual(await client.repositoryTree(TEST_PROJECT, "acme/widgets", { ifNoneMatch: answer.etag }), {
      notModified: true,
      etag: answer.etag,
    });
  });

  it("reads another ref's tree", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const answer = await client.repositoryTree(TEST_PROJECT, "acme/widgets", { ref: "feature" });
    assert.ok(!answer.notModified);
    assert.equal(answer.tree.sha, fixture.feature);
    assert.ok(answer.tree.entries.some((e) => e.path === "feature.txt"));
    assert.ok(!answer.tree.entries.some((e) => e.path === "docs/guide.md"));
  });

  it("throws a 404 RunplaneError for a repository the project does not have", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const error = await rejection(client.repositoryTree(TEST_PROJECT, "acme/nothing"));
    assert.equal(error.status, 404);
    await assert.rejects(client.repositoryTree(TEST_PROJECT, "no-slash"), /Invalid repository "no-slash"/);
  });
});
