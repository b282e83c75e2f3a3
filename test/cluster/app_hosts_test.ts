/**
 * An app's replicas per host from a cluster view (`replicas.hosts`), the process alone without one, and
 * the cluster's gauges: seats per app, host and state, calls in flight per app and host.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { appHostsOf, type ClusterView, localAppHosts, type LiveSeat, seatCounts } from "../../server/cluster/mod.ts";

function seat(hostId: string, fields: Partial<LiveSeat> & { seat: number }): LiveSeat {
  return {
    projectId: "p",
    appId: "a",
    hostId,
    url: `http://${hostId}:8000`,
    state: "ready",
    slots: 2,
    busy: 0,
    ...fields,
  };
}

const VIEW: ClusterView = {
  hosts: ["h2", "h1", "h3"].map((hostId, i) => ({
    hostId,
    url: `http://${hostId}:8000`,
    capacity: { cpu: 4, memoryBytes: 1 << 30, gpus: i },
    seenAt: 0,
  })),
  seats: [
    seat("h2", { seat: 0, busy: 1 }),
    seat("h2", { seat: 1, state: "starting" }),
    seat("h1", { seat: 2, busy: 2 }),
    seat("h3", { seat: 0, appId: "other" }),
  ],
};

describe("an app's replicas per host", () => {
  it("sums each host's seats of the app, ordered by URL, marking the asking host", () => {
    assert.deepEqual(appHostsOf(VIEW, { projectId: "p", appId: "a", hostId: "h1" }), [
      {
        host_id: "h1",
        url: "http://h1:8000",
        this_host: true,
        starting: 0,
        ready: 1,
        busy: 2,
        slots: 2,
        host_gpus: 1,
      },
      {
        host_id: "h2",
        url: "http://h2:8000",
        this_host: false,
        starting: 1,
        ready: 1,
        busy: 1,
        slots: 4,
        host_gpus: 0,
      },
    ]);
  });

  it("leaves out hosts without a seat of the app, and is empty for an app no host holds", () => {
    assert.deepEqual(appHostsOf(VIEW, { projectId: "p", appId: "other", hostId: "h1" }).map((h) => h.host_id), [
      "h3",
    ]);
    assert.deepEqual(appHostsOf(VIEW, { projectId: "q", appId: "a", hostId: "h1" }), []);
  });

  it("lists a process without a cluster alone while it has replicas, and nothing when it has none", () => {
    const local = { hostId: "rp_1", url: null, busy: 1, replicaConcurrency: 3, hostGpus: 0 };
    assert.deepEqual(localAppHosts({ ...local, starting: 1, ready: 1 }), [{
      host_id: "rp_1",
      url: null,
      this_host: true,
      starting: 1,
      ready: 1,
      busy: 1,
      slots: 6,
      host_gpus: 0,
    }]);
    assert.deepEqual(localAppHosts({ ...local, busy: 0, starting: 0, ready: 0 }), []);
  });

  it("counts the cluster's seats per app, host URL and state, and the calls in flight per app and host", () => {
    const { seats, calls } = seatCounts(VIEW);
    assert.deepEqual(
      seats.map((s) => `${s.app} ${s.host} ${s.state} ${s.count}`).sort(),
      [
        "p/a http://h1:8000 ready 1",
        "p/a http://h2:8000 ready 1",
        "p/a http://h2:8000 starting 1",
        "p/other http://h3:8000 ready 1",
      ],
    );
    assert.deepEqual(
      calls.map((c) => `${c.app} ${c.host} ${c.count}`).sort(),
      ["p/a http://h1:8000 2", "p/a http://h2:8000 1", "p/other http://h3:8000 0"],
    );
  });
});
