/**
 * The run-change feed sends only what somebody follows: two feeds on one store (two processes), on both
 * engines' notifiers, with timings shortened so that interest is learnt, renewed and forgotten in
 * fractions of a second.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createLogger } from "../../server/log.ts";
import { createRunChangeFeed, type RunChange, type RunChangeFeed } from "../../server/runs/mod.ts";
import { type Notifier, openStore, type Store } from "../../server/store/mod.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

const TIMINGS = { flushMs: 10, renewMs: 150, watchTtlMs: 500, settleMs: 100 };

function change(projectId: string, runId: string): RunChange {
  return {
    run_id: runId,
    project_id: projectId,
    app_id: "a",
    function_name: "run",
    mode: "async",
    status: "queued",
    at: new Date().toISOString(),
  };
}

/** A notifier that counts the run changes it is asked to send, by project. */
function counting(notifier: Notifier): { notifier: Notifier; sent: Map<string, number> } {
  const sent = new Map<string, number>();
  return {
    sent,
    notifier: {
      ...notifier,
      listen: notifier.listen.bind(notifier),
      notify(channel, payload, options) {
        if (channel === "runplane_run_events" && payload) {
          for (const c of JSON.parse(payload) as RunChange[]) sent.set(c.project_id, (sent.get(c.project_id) ?? 0) + 1);
        }
        return notifier.notify(channel, payload, options);
      },
    },
  };
}

/**
 * A notifier whose listening session is not live until `open()`: wake-ups before then are lost, as
 * PostgreSQL's are before LISTEN ran, and `listening()` resolves only then.
 */
function lateListening(notifier: Notifier): { notifier: Notifier; open(): void } {
  let live = false;
  let resolve!: () => void;
  const opened = new Promise<void>((r) => (resolve = r));
  return {
    open() {
      live = true;
      resolve();
    },
    notifier: {
      ...notifier,
      notify: notifier.notify.bind(notifier),
      listen: (channel, listener) => notifier.listen(channel, (payload) => live && listener(payload)),
      listening: () => opened.then(() => notifier.listening()),
      close: notifier.close.bind(notifier),
    },
  };
}

/** As `until`, for a check that waits. */
async function untilAsync(check: () => Promise<boolean>, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
  }
}

/** Waits until `check` holds, or fails after `timeoutMs`. */
async function until(check: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

for (const engine of await engines()) {
  describe(`run changes go only where a page follows them (${engine})`, () => {
    let t: TestStore;
    let other: Store;
    const logger = createLogger({ level: "silent" });
    const feeds: RunChangeFeed[] = [];
    // The listening sessions do not hold the process open (a server's socket does): this test holds it.
    let keepAlive: ReturnType<typeof setInterval>;
    before(async () => {
      keepAlive = setInterval(() => {}, 1_000);
      t = await openTestStore(engine);
      // A second "process": its own store (on PostgreSQL its own pool and listening session).
      other = await openStore(t.dataDir, { databaseUrl: t.databaseUrl, migrate: false });
    });
    after(async () => {
      clearInterval(keepAlive);
      for (const feed of feeds) await feed.close();
      await other?.close();
      await t?.close();
    });

    /** Two feeds, listening. `early` runs right after the sender is made, before anything is awaited. */
    async function twoFeeds(timings: Partial<typeof TIMINGS> = {}, early?: (sender: RunChangeFeed) => void) {
      const a = counting(t.store.notifier);
      const sender = createRunChangeFeed({ notifier: a.notifier, logger, ...TIMINGS, ...timings });
      early?.(sender);
      const watcher = createRunChangeFeed({ notifier: other.notifier, logger, ...TIMINGS, ...timings });
      feeds.push(sender, watcher);
      await other.notifier.listening();
      await t.store.notifier.listening();
      return { sender, sent: a.sent, watcher };
    }

    it("sends every change while just started, then only a followed project's, to the process that follows it", async () => {
      // Published before anything is awaited: on a loaded machine, waiting for the listening sessions
      // alone can outlast the 100 ms in which a new feed sends everything.
      const { sender, sent, watcher } = await twoFeeds({}, (early) => early.publish(change("p-early", "run_1")));
      await until(() => sent.get("p-early") === 1, "a change sent while what is followed is not known yet");

      await sleep(TIMINGS.watchTtlMs + 50);
      sender.publish(change("p-nobody", "run_2"));
      await sleep(TIMINGS.flushMs * 5);
      assert.equal(sent.get("p-nobody"), undefined, "a change nobody follows is not sent");

      const seen: Array<RunChange | string> = [];
      const stop = watcher.subscribe("p-followed", (c) => seen.push(typeof c === "string" ? c : c.run_id));
      // The sender hears of the page once the watcher's word arrives.
      await until(() => {
        sender.publish(change("p-followed", `run_probe_${seen.length}`));
        return seen.some((c) => typeof c === "string" && c.startsWith("run_probe_"));
      }, "the followed project's changes reaching the other process");
      sender.publish(change("p-nobody", "run_3"));
      sender.publish(change("p-followed", "run_4"));
      await until(() => seen.includes("run_4"), "a later change of the followed project");
      assert.equal(sent.get("p-nobody"), undefined, "another project's changes still are not sent");
      await until(() => seen.includes("missed"), "the new page told to read again once every process knows");

      stop();
      // The word is not renewed any more: after its time, the sender stops sending the project's changes.
      // Its time counts from when the last renewal arrived, which a loaded machine can deliver late (CI
      // once sent a change 100 ms past it): so the sender is probed until it stops, and then stays stopped.
      await sleep(TIMINGS.watchTtlMs);
      let probes = 0;
      await untilAsync(async () => {
        const sentBefore = sent.get("p-followed") ?? 0;
        sender.publish(change("p-followed", `run_gone_${probes++}`));
        await sleep(TIMINGS.flushMs * 5);
        return (sent.get("p-followed") ?? 0) === sentBefore;
      }, "the sender to stop sending the project nobody follows");
      const before = sent.get("p-followed") ?? 0;
      sender.publish(change("p-followed", "run_5"));
      await sleep(TIMINGS.flushMs * 5);
      assert.equal(sent.get("p-followed") ?? 0, before, "a project nobody follows any more is not sent");
    });

    it("keeps sending a followed project's changes past the word's time while the page stays open (renewed)", async () => {
      const { sender, sent, watcher } = await twoFeeds();
      const seen: string[] = [];
      const stop = watcher.subscribe("p-long", (c) => {
        if (typeof c !== "string") seen.push(c.run_id);
      });
      try {
        await sleep(TIMINGS.watchTtlMs * 3);
        sender.publish(change("p-long", "run_late"));
        await until(() => seen.includes("run_late"), "a change three word-times after the page opened");
        assert.equal(sent.get("p-long"), 1);
      } finally {
        stop();
      }
    });

    it("a process that listens late sends everything until it does, then asks, and learns of a page opened meanwhile", async () => {
      const a = counting(t.store.notifier);
      const late = lateListening(a.notifier);
      const sender = createRunChangeFeed({ notifier: late.notifier, logger, ...TIMINGS, renewMs: 10_000 });
      feeds.push(sender);
      const watcher = createRunChangeFeed({ notifier: other.notifier, logger, ...TIMINGS, renewMs: 10_000 });
      feeds.push(watcher);
      await other.notifier.listening();
      const seen: string[] = [];
      // The page's word is said while the sender does not listen yet: it never reaches it.
      const stop = watcher.subscribe("p-meanwhile", (c) => {
        if (typeof c !== "string") seen.push(c.run_id);
      });
      try {
        await sleep(TIMINGS.settleMs * 3);
        sender.publish(change("p-unknown", "run_before"));
        await until(() => a.sent.get("p-unknown") === 1, "a change sent while the sender cannot hear what is followed");
        late.open();
        await sleep(TIMINGS.settleMs * 3);
        sender.publish(change("p-meanwhile", "run_after"));
        sender.publish(change("p-unknown", "run_other"));
        await until(() => seen.includes("run_after"), "the page opened meanwhile getting the sender's change");
        assert.equal(a.sent.get("p-unknown"), 1, "once it asked and heard, other projects are not sent");
      } finally {
        stop();
      }
    });

    it("a process that starts while a page is open elsewhere asks, and sends that project's changes at once", async () => {
      // Renewed only every 10 s: what the new process learns within the test, it learns by asking.
      const watcher = createRunChangeFeed({ notifier: other.notifier, logger, ...TIMINGS, renewMs: 10_000 });
      feeds.push(watcher);
      const seen: string[] = [];
      const stop = watcher.subscribe("p-open", (c) => {
        if (typeof c !== "string") seen.push(c.run_id);
      });
      try {
        await other.notifier.listening();
        await sleep(TIMINGS.watchTtlMs); // the page's first word is long gone by its time
        const a = counting(t.store.notifier);
        const late = createRunChangeFeed({ notifier: a.notifier, logger, ...TIMINGS, renewMs: 10_000 });
        feeds.push(late);
        await t.store.notifier.listening();
        await sleep(TIMINGS.settleMs * 3);
        late.publish(change("p-elsewhere", "run_x"));
        late.publish(change("p-open", "run_y"));
        await until(() => seen.includes("run_y"), "the open page's project reaching it from the new process");
        assert.equal(a.sent.get("p-elsewhere"), undefined, "once the answers are in, other projects are not sent");
      } finally {
        stop();
      }
    });
  });
}
