import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { createStoredWebSocketTickets } from "../../server/auth/mod.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

const APP = { projectId: "p-demo", appId: "ws" };

for (const engine of await engines()) {
  describe(`the cluster's WebSocket tickets in the store (${engine})`, () => {
    let t: TestStore;
    let clock = 1_000_000;
    before(async () => (t = await openTestStore(engine)));
    after(() => t?.close());

    it("opens one connection with a ticket minted by another host, and refuses it the second time", async () => {
      const minting = createStoredWebSocketTickets(t.store.db, { now: () => clock });
      const consuming = createStoredWebSocketTickets(t.store.db, { now: () => clock });
      const minted = await minting.mint(APP);
      assert.ok(minted);
      assert.equal(await consuming.consume(minted.ticket, APP), null);
      assert.equal(await consuming.consume(minted.ticket, APP), "unknown");
      assert.equal(await minting.consume(minted.ticket, APP), "unknown");
    });

    it("stores only the ticket's SHA-256, never the ticket", async () => {
      const tickets = createStoredWebSocketTickets(t.store.db, { now: () => clock });
      const minted = (await tickets.mint(APP))!;
      const rows = await t.store.db.selectFrom("websocket_tickets").selectAll().execute();
      assert.ok(rows.every((row) => !Object.values(row).includes(minted.ticket)), "a ticket was stored in the clear");
      const digest = createHash("sha256").update(minted.ticket).digest("base64url");
      assert.ok(rows.some((row) => row.digest === digest));
    });

    it("lets exactly one of many hosts presenting the same ticket at once open a connection", async () => {
      const minted = (await createStoredWebSocketTickets(t.store.db, { now: () => clock }).mint(APP))!;
      const answers = await Promise.all(
        Array.from(
          { length: 8 },
          () => createStoredWebSocketTickets(t.store.db, { now: () => clock }).consume(minted.ticket, APP),
        ),
      );
      assert.equal(answers.filter((answer) => answer === null).length, 1, JSON.stringify(answers));
    });

    it("refuses an expired ticket and one of another app, each spent once presented", async () => {
      const tickets = createStoredWebSocketTickets(t.store.db, { now: () => clock, lifetimeMs: 1_000 });
      const expiring = (await tickets.mint(APP))!;
      const other = (await tickets.mint(APP))!;
      clock += 1_000;
      assert.equal(await tickets.consume(expiring.ticket, APP), "expired");
      clock -= 1_000;
      assert.equal(await tickets.consume(other.ticket, { projectId: "p-demo", appId: "other" }), "other-app");
      assert.equal(await tickets.consume(other.ticket, APP), "unknown");
    });
  });
}
