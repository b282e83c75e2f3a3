/** A worker's idle seats (server/host/idle_seats.ts): reused newest first, given back once idle a while. */
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, it } from "node:test";
import { IdleSeats } from "../../server/host/idle_seats.ts";
import type { HeldSeat } from "../../server/host/call_client.ts";

function seat(replica: number, released: number[]): HeldSeat {
  return { replica, graceMs: 1000, keep: true, release: () => void released.push(replica) };
}

describe("a worker's idle seats", () => {
  it("hands a kept seat to the next call of the same app, newest first, and none to another app", () => {
    const released: number[] = [];
    const seats = new IdleSeats({ lingerMs: 60_000, usable: () => true });
    seats.keep("p/a", seat(1, released));
    seats.keep("p/a", seat(2, released));
    assert.equal(seats.take("p/b"), null);
    assert.equal(seats.take("p/a")?.replica, 2);
    assert.equal(seats.take("p/a")?.replica, 1);
    assert.equal(seats.take("p/a"), null);
    assert.deepEqual(released, []);
    seats.releaseAll();
  });

  it("gives back a seat whose replica ended instead of keeping or handing it out", () => {
    const released: number[] = [];
    const ended = new Set<number>();
    const seats = new IdleSeats({ lingerMs: 60_000, usable: (s) => !ended.has(s.replica) });
    ended.add(1);
    seats.keep("p/a", seat(1, released));
    assert.deepEqual(released, [1], "not kept");
    seats.keep("p/a", seat(2, released));
    seats.keep("p/a", seat(3, released));
    ended.add(3);
    assert.equal(seats.take("p/a")?.replica, 2, "the ended replica's seat is skipped");
    assert.deepEqual(released, [1, 3]);
    seats.releaseAll();
  });

  it("gives back what stayed idle past the linger, and everything on releaseAll", async () => {
    const released: number[] = [];
    const seats = new IdleSeats({ lingerMs: 30, usable: () => true });
    seats.keep("p/a", seat(1, released));
    // Given back by the sweep after its linger (however late a loaded machine runs the timer).
    for (let waited = 0; released.length === 0 && waited < 10_000; waited += 20) await sleep(20);
    assert.deepEqual(released, [1], "given back after its linger");
    assert.equal(seats.take("p/a"), null);
    seats.keep("p/a", seat(2, released));
    seats.keep("p/b", seat(3, released));
    seats.releaseAll();
    assert.deepEqual(released.sort(), [1, 2, 3]);
  });
});
