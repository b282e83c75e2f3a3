/**
 * The run ids a client remembers (`client/_known_runs.ts`), through the client's public calls: a run id
 * alone names a run the client saw, the last 10,000 of them, and the calls stay usable when taken off the
 * client. A fake `fetch` answers, so no server runs.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createRunplaneClient, type RunplaneClient } from "../../client/mod.ts";

/** A client whose REST API lists `count` runs of app `a` in project `p` (`r-0` oldest) and answers any run. */
function clientWithRuns(count: number): { client: RunplaneClient; paths: string[] } {
  const paths: string[] = [];
  async function fetch(request: Request): Promise<Response> {
    const { pathname } = new URL(request.url);
    paths.push(`${request.method} ${pathname}`);
    if (pathname === "/v4/projects/p/runs") {
      const runs = Array.from({ length: count }, (_, i) => ({ run_id: `r-${i}`, project_id: "p", app_id: "a" }));
      return Response.json({ runs, next_cursor: null });
    }
    const runId = pathname.split("/").at(-1);
    return Response.json({ run_id: runId, project_id: "p", app_id: "a", status: "success" });
  }
  return { client: createRunplaneClient({ baseUrl: "http://runplane.test", fetch }), paths };
}

describe("a client's known runs", () => {
  it("names the app of a listed run for getRun, waitForRun and cancelRun called with its id alone", async () => {
    const { client, paths } = clientWithRuns(1);
    await client.listProjectRuns("p");
    await client.getRun("r-0");
    await client.waitForRun("r-0");
    await client.cancelRun("r-0");
    assert.deepEqual(paths, [
      "GET /v4/projects/p/runs",
      "GET /v4/projects/p/apps/a/runs/r-0",
      "GET /v4/projects/p/apps/a/runs/r-0",
      "DELETE /v4/projects/p/apps/a/runs/r-0",
    ]);
  });

  it("remembers the last 10,000 run ids and forgets the oldest first", async () => {
    const { client } = clientWithRuns(10_001);
    await client.listProjectRuns("p");
    await assert.rejects(client.getRun("r-0"), {
      name: "TypeError",
      message: `This client did not start run r-0, so it does not know its app: call getRun("<project>/<app>", "r-0")`,
    });
    assert.equal((await client.getRun("r-1")).run_id, "r-1");
    assert.equal((await client.getRun("r-10000")).run_id, "r-10000");
  });

  it("rejects (does not throw) a call given an app and no run id, naming both forms", async () => {
    const { client, paths } = clientWithRuns(0);
    const call = client.cancelRun({ project: "p", app: "a" } as unknown as string);
    assert.ok(call instanceof Promise);
    await assert.rejects(call, {
      name: "TypeError",
      message: "cancelRun needs the run id: cancelRun(runId) or cancelRun(app, runId)",
    });
    assert.deepEqual(paths, []);
  });

  it("keeps working when its calls are taken off the client", async () => {
    const { client, paths } = clientWithRuns(1);
    const { listProjectRuns, getRun, health } = client;
    await listProjectRuns("p");
    assert.equal((await getRun("r-0")).status, "success");
    await health();
    assert.deepEqual(paths.at(-1), "GET /healthz");
  });
});
