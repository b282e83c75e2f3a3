/**
 * The example chat room (examples/apps/p-demo/chat, issue 47): a realtime app as `npm start` serves it,
 * reached by two real WebSockets through the server: what one member says, both hear.
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import WebSocket from "ws";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const EXAMPLE = new URL("../../examples/apps/p-demo/chat/", import.meta.url);

type Said = { from: string; text: string; members: number };

/** A member of the room: its socket, and what it heard, in order. */
interface Member {
  socket: WebSocket;
  /** The next message heard whose text matches `text`. */
  hears(text: RegExp): Promise<Said>;
  closed: Promise<number>;
}

function join(url: string, token: string): Promise<Member> {
  const socket = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` } });
  const heard: Said[] = [];
  const waiting: Array<() => void> = [];
  socket.on("message", (data: Buffer) => {
    heard.push(JSON.parse(data.toString()) as Said);
    for (const wake of waiting.splice(0)) wake();
  });
  const closed = new Promise<number>((resolve) => socket.once("close", (code) => resolve(code)));
  async function hears(text: RegExp): Promise<Said> {
    for (;;) {
      const index = heard.findIndex((said) => text.test(said.text));
      if (index >= 0) return heard.splice(0, index + 1).pop()!;
      await new Promise<void>((resolve) => waiting.push(resolve));
    }
  }
  return new Promise((resolve, reject) => {
    socket.once("open", () => resolve({ socket, hears, closed }));
    socket.once("error", reject);
  });
}

describe("the example chat room", () => {
  let t: TestServer;

  before(async () => {
    t = await startTestServer();
    await deployApp(t, "chat", {
      toml: await readFile(new URL("runplane.toml", EXAMPLE), "utf8"),
      files: { "server.py": await readFile(new URL("server.py", EXAMPLE), "utf8") },
    });
  });
  after(async () => {
    await t.close();
  });

  it("sends what one member says to every member, and records each connection as a WebSocket run", async () => {
    const url = `${t.url.replace("http", "ws")}/v4/${TEST_PROJECT}/chat/room`;
    const ada = await join(url, t.token);
    await ada.hears(/joined$/);
    const bob = await join(url, t.token);
    const joined = await ada.hears(/joined$/);
    assert.equal(joined.members, 2);
    ada.socket.send("hello, <b>room</b>");
    const [toAda, toBob] = await Promise.all([ada.hears(/^hello/), bob.hears(/^hello/)]);
    assert.deepEqual(toBob, toAda);
    assert.equal(toBob.text, "hello, <b>room</b>");
    assert.equal(toBob.members, 2);
    bob.socket.close(1000);
    assert.equal(await bob.closed, 1000);
    assert.equal((await ada.hears(/left$/)).members, 1);
    ada.socket.close(1000);
    assert.equal(await ada.closed, 1000);

    // Each connection's record is written when it ends; the list shows both once written.
    type Listed = { mode: string; function_name: string; status: string };
    let runs: Listed[] = [];
    await waitFor(
      async () => {
        const response = await checkedFetch(`${t.url}/v4/projects/${TEST_PROJECT}/apps/chat/runs?mode=websocket`, {
          headers: { Authorization: `Bearer ${t.token}` },
        });
        assert.equal(response.status, 200);
        runs = ((await response.json()) as { runs: Listed[] }).runs;
        return runs.length === 2 && runs.every((run) => run.status !== "running");
      },
      "both connections' runs to end",
      60_000,
    );
    assert.ok(runs.every((run) => run.mode === "websocket" && run.function_name === "room"), JSON.stringify(runs));
  });
});
