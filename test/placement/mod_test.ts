import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import type { HostRole } from "../../server/host/mod.ts";
import { parseMasterKey } from "../../server/keys/mod.ts";
import { type ClusterHost, joinsCluster, placeExecutors } from "../../server/placement/mod.ts";
import type { ExecutedCall, ExecuteRequest, RunExecutor } from "../../server/runs/mod.ts";
import type { Runtime } from "../../server/runtime/mod.ts";

const REQUEST = { projectId: "p", app: "a", functionName: "f", input: {}, runId: "r" } as unknown as ExecuteRequest;

/** A runtime whose `invoke` answers "local", with 3 free slots of 4. */
function fakeRuntime(): Runtime {
  return {
    invoke: async () => ({ result: "local" }),
    capacity: () => ({ slots: 4, busy: 1, queued: 0, waitingForCapacity: 0 }),
    appSettings: () => ({ responseGracePeriodMs: 1234 }),
  } as unknown as Runtime;
}

function executor(answer: string): RunExecutor {
  return { freeSlots: () => 9, gracePeriodMs: () => 1, execute: async () => ({ result: answer }) as ExecutedCall };
}

/** A cluster host whose executor answers "cluster" and its placing executor "placing". */
function fakeCluster(): ClusterHost {
  return { executor: { ...executor("cluster"), placing: executor("placing") } } as unknown as ClusterHost;
}

function workerRole(forwarded: Array<{ here?: boolean } | undefined>): HostRole {
  return {
    kind: "worker",
    forward: async (_request: ExecuteRequest, options?: { here?: boolean }) => {
      forwarded.push(options);
      return { result: options?.here ? "worker here" : "worker" } as ExecutedCall;
    },
  } as unknown as HostRole;
}

const supervisor = { kind: "supervisor" } as unknown as HostRole;

async function answers(executors: { calls: RunExecutor; forwarded: RunExecutor }): Promise<[unknown, unknown]> {
  const calls = await executors.calls.execute(REQUEST);
  const forwarded = await executors.forwarded.execute(REQUEST);
  return [(calls as { result: unknown }).result, (forwarded as { result: unknown }).result];
}

describe("placeExecutors: the role × cluster table", () => {
  it("runs a single process's and a supervisor's calls and forwarded calls on its replicas without a cluster, and dispatches", async () => {
    for (const role of [undefined, supervisor]) {
      const executors = placeExecutors(role, { runtime: fakeRuntime() });
      assert.deepEqual(await answers(executors), ["local", "local"]);
      assert.equal(executors.dispatch, true);
      assert.equal(executors.calls.freeSlots({ projectId: "p", app: "a" }), 3);
    }
  });

  it("routes a cluster host's calls through the cluster executor and forwarded calls through its placing one", async () => {
    for (const role of [undefined, supervisor]) {
      const cluster = fakeCluster();
      const executors = placeExecutors(role, { runtime: fakeRuntime(), cluster });
      assert.equal(executors.calls, cluster.executor);
      assert.equal(executors.forwarded, cluster.executor.placing);
      assert.deepEqual(await answers(executors), ["cluster", "placing"]);
      assert.equal(executors.dispatch, true);
    }
  });

  it("hands a worker's calls to its role (forwarded ones with here), answers capacity from its own runtime, and never dispatches", async () => {
    const forwarded: Array<{ here?: boolean } | undefined> = [];
    const executors = placeExecutors(workerRole(forwarded), { runtime: fakeRuntime() });
    assert.deepEqual(await answers(executors), ["worker", "worker here"]);
    assert.deepEqual(forwarded, [undefined, { here: true }]);
    assert.equal(executors.dispatch, false);
    assert.equal(executors.calls.freeSlots({ projectId: "p", app: "a" }), 3);
    assert.equal(executors.forwarded.gracePeriodMs({ projectId: "p", app: "a" }), 1234);
  });
});

describe("joinsCluster", () => {
  const masterKey = parseMasterKey(randomBytes(32).toString("base64"));
  const settings = { advertiseUrl: "http://10.0.0.1:8080", sharedStore: true, masterKey };

  it("makes a forward key for a process advertised on a shared store with a master key, but not for a worker", () => {
    assert.notEqual(joinsCluster(undefined, settings), null);
    assert.notEqual(joinsCluster(supervisor, settings), null);
    assert.equal(joinsCluster(workerRole([]), settings), null);
  });

  it("joins no cluster without an advertised URL, a shared store or a master key", () => {
    assert.equal(joinsCluster(undefined, { ...settings, advertiseUrl: null }), null);
    assert.equal(joinsCluster(undefined, { ...settings, sharedStore: false }), null);
    assert.equal(joinsCluster(undefined, { ...settings, masterKey: null }), null);
  });
});
