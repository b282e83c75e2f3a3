import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type BudgetClient, HostBudget } from "../../server/runtime/_host_budget.ts";

const GIB = 1024 ** 3;

function client(name: string, events: string[], idle = 0): BudgetClient & { idle: number } {
  return {
    idle,
    wake: () => events.push(`wake ${name}`),
    evictIdle() {
      if (this.idle === 0) return false;
      this.idle--;
      events.push(`evict ${name}`);
      return true;
    },
  };
}

describe("the host's budget", () => {
  it("reserves exact sums of fractional cores and bytes, and gives them back once", () => {
    const budget = new HostBudget({ cpu: 1, memoryBytes: GIB });
    const shares = [0.1, 0.2, 0.3, 0.4].map((cpu) => budget.tryReserve({ cpu, memoryBytes: GIB / 8 }));
    assert.ok(shares.every((share) => share !== null), "0.1 + 0.2 + 0.3 + 0.4 cores fit in 1");
    assert.equal(budget.tryReserve({ cpu: 0.001, memoryBytes: 0 }), null);
    shares[0]!.release();
    shares[0]!.release();
    assert.deepEqual(budget.reserved, { cpu: 0.9, memoryBytes: (3 * GIB) / 8 });
    assert.equal(budget.tryReserve({ cpu: 0.1, memoryBytes: GIB }), null, "memory counts too");
  });

  it("says when one replica could never fit, naming the setting", () => {
    const budget = new HostBudget({ cpu: 2, memoryBytes: GIB });
    assert.match(
      budget.neverFits({ cpu: 3, memoryBytes: 1 }) ?? "",
      /cpu = 3 is more than this host's RUNPLANE_HOST_CPU \(2 cores\)/,
    );
    assert.match(budget.neverFits({ cpu: 1, memoryBytes: 2 * GIB }) ?? "", /RUNPLANE_HOST_MEMORY \(1 GiB\)/);
    assert.equal(budget.neverFits({ cpu: 2, memoryBytes: GIB }), undefined);
  });

  it("stops one idle replica of another client for a waiter, and wakes waiters in order at each release", () => {
    const events: string[] = [];
    const budget = new HostBudget({ cpu: 1, memoryBytes: GIB });
    const [a, b, c] = [client("a", events), client("b", events, 2), client("c", events)];
    for (const each of [a, b, c]) budget.join(each);
    const held = budget.tryReserve({ cpu: 1, memoryBytes: GIB })!;
    budget.wait(a, { cpu: 1, memoryBytes: GIB });
    budget.wait(c, { cpu: 1, memoryBytes: GIB });
    assert.deepEqual(events, ["evict b"], "one eviction at a time");
    assert.ok(budget.othersWait(b) && budget.othersWait(a));
    held.release();
    assert.deepEqual(events, ["evict b", "wake a", "wake c"]);
    budget.satisfied(a);
    budget.leave(c);
    assert.equal(budget.othersWait(b), false);
  });
});
