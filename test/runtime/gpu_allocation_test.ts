/** The host's GPUs given out whole, one replica at a time, through the host's budget. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { Gpu } from "../../server/gpus/mod.ts";
import { GpuAllocation } from "../../server/runtime/_gpu_allocation.ts";
import { type BudgetClient, HostBudget, type Reservation } from "../../server/runtime/_host_budget.ts";

const GIB = 1024 ** 3;

function gpu(index: number, model: string | null): Gpu {
  return { id: `GPU-${index}`, index, uuid: `GPU-${index}`, model, memoryMiB: null, minor: index };
}

const H100 = "NVIDIA H100 80GB HBM3";
const L4 = "NVIDIA L4";

describe("the GPU allocation", () => {
  it("gives free GPUs of the model asked for, in the inventory's order, never one twice until given back", () => {
    const gpus = new GpuAllocation([gpu(0, H100), gpu(1, L4), gpu(2, H100)]);
    assert.deepEqual(gpus.take({ count: 1 })!.map((g) => g.id), ["GPU-0"]);
    assert.deepEqual(gpus.take({ count: 1, compute: "HOPPER_H100" })!.map((g) => g.id), ["GPU-2"]);
    assert.equal(gpus.take({ count: 1, compute: "H100" }), null, "both H100s are held");
    assert.ok(gpus.short({ count: 1, compute: "H100" }));
    const l4 = gpus.take({ count: 1 })!;
    assert.deepEqual(l4.map((g) => g.id), ["GPU-1"]);
    assert.equal(gpus.take({ count: 1 }), null);
    assert.equal(gpus.held, 3);
    gpus.give(l4);
    assert.equal(gpus.take({ count: 2 }), null, "two are asked for, one is free: none is taken");
    assert.equal(gpus.held, 2);
    assert.deepEqual(gpus.take({ count: 0 }), [], "no GPU asked, none given");
  });

  it("says why a replica could never get its GPUs: none here, no GPU of the model, too few of it", () => {
    assert.match(
      new GpuAllocation([]).neverFits({ count: 1 }) ?? "",
      /gpu_count = 1, but this host has no GPUs .*RUNPLANE_GPUS/,
    );
    const gpus = new GpuAllocation([gpu(0, H100), gpu(1, H100), gpu(2, L4), gpu(3, null)]);
    assert.equal(
      gpus.neverFits({ count: 1, compute: "AMPERE_A100" }),
      '[hardware] compute = "AMPERE_A100" matches none of this host\'s GPUs (2 × NVIDIA H100 80GB HBM3, 1 × NVIDIA L4, 1 × (model unknown)): no replica of it could ever start here; name one of these models, or deploy it to a host with that one',
    );
    assert.match(
      gpus.neverFits({ count: 3, compute: "H100" }) ?? "",
      /gpu_count = 3 is more than this host's 2 GPUs matching compute = "H100" \(2 × NVIDIA H100 80GB HBM3\)/,
    );
    assert.match(gpus.neverFits({ count: 5 }) ?? "", /gpu_count = 5 is more than this host's 4 GPUs \(/);
    assert.equal(gpus.neverFits({ count: 4 }), undefined);
    assert.equal(gpus.neverFits({ count: 0, compute: "A100" }), undefined);
  });
});

/** A pool as the budget sees it, with idle replicas holding `idle` reservations. */
function pool(name: string, events: string[], idle: Reservation[] = []): BudgetClient {
  return {
    wake: () => events.push(`wake ${name}`),
    evictIdle(helps) {
      const at = idle.findIndex((reservation) => !helps || helps(reservation));
      if (at < 0) return false;
      events.push(`evict ${name}`);
      idle.splice(at, 1)[0].release();
      return true;
    },
  };
}

describe("the host's budget with GPUs", () => {
  it("reserves whole GPUs with cores and memory, and gives them back once", () => {
    const budget = new HostBudget({ cpu: 4, memoryBytes: 4 * GIB }, { gpus: [gpu(0, H100), gpu(1, H100)] });
    const first = budget.tryReserve({ cpu: 1, memoryBytes: GIB, gpuCount: 1 })!;
    const second = budget.tryReserve({ cpu: 1, memoryBytes: GIB, gpuCount: 1, compute: "H100" })!;
    assert.deepEqual([first.gpus[0].id, second.gpus[0].id], ["GPU-0", "GPU-1"]);
    assert.equal(budget.tryReserve({ cpu: 1, memoryBytes: GIB, gpuCount: 1 }), null, "no GPU is free");
    assert.deepEqual(budget.reserved, { cpu: 2, memoryBytes: 2 * GIB }, "a refused reservation holds nothing");
    assert.deepEqual(budget.tryReserve({ cpu: 1, memoryBytes: GIB, compute: "CPU" })?.gpus, [], "a CPU replica fits");
    first.release();
    first.release();
    assert.equal(budget.gpus.held, 1);
    assert.deepEqual(budget.tryReserve({ cpu: 1, memoryBytes: GIB, gpuCount: 1 })!.gpus[0].id, "GPU-0");
    assert.equal(budget.tryReserve({ cpu: 1, memoryBytes: GIB, gpuCount: 1 }), null);
  });

  it("for an app waiting for GPUs, stops an idle replica holding one, not one holding only cores", () => {
    const events: string[] = [];
    const budget = new HostBudget({ cpu: 8, memoryBytes: 8 * GIB }, { gpus: [gpu(0, H100)] });
    const cpuOnly = budget.tryReserve({ cpu: 1, memoryBytes: GIB })!;
    const holding = budget.tryReserve({ cpu: 1, memoryBytes: GIB, gpuCount: 1 })!;
    const [cpuApp, gpuApp, waiter] = [
      pool("cpu", events, [cpuOnly]),
      pool("gpu", events, [holding]),
      pool("w", events),
    ];
    // The CPU app joined first: it is asked first, and must refuse.
    for (const each of [cpuApp, gpuApp, waiter]) budget.join(each);
    const need = { cpu: 1, memoryBytes: GIB, gpuCount: 1 };
    assert.equal(budget.tryReserve(need), null);
    assert.equal(budget.othersWait(cpuApp, cpuOnly), false, "nobody waits yet");
    budget.wait(waiter, need);
    assert.deepEqual(events, ["evict gpu", "wake w"]);
    assert.ok(budget.tryReserve(need), "the freed GPU is the waiter's");
  });

  it("tells an idle replica's pool whether its reservation would help whoever waits", () => {
    const events: string[] = [];
    const budget = new HostBudget({ cpu: 8, memoryBytes: 8 * GIB }, { gpus: [gpu(0, H100), gpu(1, L4)] });
    const cpuOnly = budget.tryReserve({ cpu: 1, memoryBytes: GIB })!;
    const l4 = budget.tryReserve({ cpu: 1, memoryBytes: GIB, gpuCount: 1, compute: "L4" })!;
    const h100 = budget.tryReserve({ cpu: 1, memoryBytes: GIB, gpuCount: 1, compute: "H100" })!;
    const [holder, waiter] = [pool("holder", events), pool("w", events)];
    budget.join(holder);
    budget.join(waiter);
    budget.wait(waiter, { cpu: 1, memoryBytes: GIB, gpuCount: 1, compute: "H100" });
    assert.equal(budget.othersWait(holder, cpuOnly), false, "cores alone do not help: an H100 is missing");
    assert.equal(budget.othersWait(holder, l4), false, "an L4 is not an H100");
    assert.equal(budget.othersWait(holder, h100), true);
    assert.equal(budget.othersWait(waiter, h100), false, "a pool does not make room for itself");
  });
});
