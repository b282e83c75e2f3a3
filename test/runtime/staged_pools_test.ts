/**
 * The pools `Runtime.stage` started for deployments not served yet: the reload that serves one takes its
 * pool (and its warm replica) over, once; anything else stops it.
 */
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { describe, it } from "node:test";
import type { AppVersion } from "../../server/runtime/_app_registry.ts";
import { type Replica, ReplicaPool } from "../../server/runtime/_replica_pool.ts";
import { StagedPools } from "../../server/runtime/_staged_pools.ts";
import { parseAppConfig } from "../../server/runtime/mod.ts";
import { createLogger } from "../../server/log.ts";

const logger = createLogger({ level: "error", destination: new Writable({ write: (_c, _e, done) => done() }) });

/** A replica that is ready at once and ends when stopped. */
class StandInReplica implements Replica {
  readonly pid = undefined;
  readonly ready = Promise.resolve();
  readonly wasReady = true;
  usable = true;
  readonly exited: Promise<void>;
  #end!: () => void;

  constructor() {
    this.exited = new Promise((resolve) => (this.#end = resolve));
  }

  stop(): Promise<void> {
    this.usable = false;
    this.#end();
    return this.exited;
  }
}

/** A pool kept warm with one replica, and how many replicas it started. */
function warmPool(): { pool: ReplicaPool<StandInReplica>; started: StandInReplica[] } {
  const started: StandInReplica[] = [];
  const pool = new ReplicaPool<StandInReplica>({
    label: "p-x/app",
    minReplicas: 1,
    maxReplicas: 1,
    slotsPerReplica: 1,
    cooldownMs: 60_000,
    queueLimit: 1,
    logger,
    spawn: () => {
      const replica = new StandInReplica();
      started.push(replica);
      return replica;
    },
  });
  return { pool, started };
}

function version(deploymentId: string): AppVersion {
  return {
    projectId: "p-x",
    name: "app",
    dir: "/nowhere",
    fingerprint: `deployment:${deploymentId}`,
    source: "deployment",
    deploymentId,
    config: parseAppConfig("", "/nowhere"),
  };
}

describe("staged pools", () => {
  it("hands the pool staged for a deployment to the reload that serves it, once, and releasing it then stops nothing", async () => {
    const staged = new StagedPools<StandInReplica>();
    const { pool, started } = warmPool();
    const release = staged.add({ version: version("dep_1"), secrets: "s" }, pool);
    assert.equal(staged.take({ version: version("dep_1"), secrets: "s" }), pool);
    assert.equal(staged.take({ version: version("dep_1"), secrets: "s" }), undefined, "taken once");
    await release();
    assert.equal(started.length, 1);
    assert.ok(started[0].usable, "the replica taken over still serves");
    await pool.close();
  });

  it("stops a staged pool when it is released before a reload took it", async () => {
    const staged = new StagedPools<StandInReplica>();
    const { pool, started } = warmPool();
    const release = staged.add({ version: version("dep_1"), secrets: "s" }, pool);
    await release();
    assert.equal(started[0].usable, false);
    assert.equal(staged.take({ version: version("dep_1"), secrets: "s" }), undefined);
  });

  it("stops a staged pool the project's secrets changed since, instead of serving with the old ones", async () => {
    const staged = new StagedPools<StandInReplica>();
    const { pool, started } = warmPool();
    staged.add({ version: version("dep_1"), secrets: "before" }, pool);
    assert.equal(staged.take({ version: version("dep_1"), secrets: "after" }), undefined);
    await started[0].exited;
  });

  it("stops a staged pool whose version is refused when it is to be served (no config)", async () => {
    const staged = new StagedPools<StandInReplica>();
    const { pool, started } = warmPool();
    staged.add({ version: version("dep_1"), secrets: "s" }, pool);
    const { config: _, ...refused } = version("dep_1");
    assert.equal(staged.take({ version: { ...refused, error: "over the limit" }, secrets: "s" }), undefined);
    await started[0].exited;
  });

  it("gives every staged pool to a closing runtime", () => {
    const staged = new StagedPools<StandInReplica>();
    const first = warmPool().pool;
    const second = warmPool().pool;
    staged.add({ version: version("dep_1"), secrets: "s" }, first);
    staged.add({ version: version("dep_2"), secrets: "s" }, second);
    assert.deepEqual(staged.drain(), [first, second]);
    assert.deepEqual(staged.drain(), []);
    void first.close();
    void second.close();
  });
});
