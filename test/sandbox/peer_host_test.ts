/**
 * The egress tests' peer host (`startPeerHost` in test/_helpers/sandbox.ts): the host reaches both of its
 * addresses, and making and removing it adds or removes no address in the host's network namespace.
 * Chromium fails the page loads in flight with net::ERR_NETWORK_CHANGED when an address there changes, and
 * the browser tests run beside the sandbox tests (CI's dashboard pages met it while the peer host had an
 * address of its own on the host's end).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { connect } from "node:net";
import { describe, it } from "node:test";
import { startPeerHost } from "../_helpers/sandbox.ts";

/** Every address of every link in this network namespace, as `ip -o addr` lists them (link, family, address). */
function hostAddresses(): string[] {
  return execFileSync("ip", ["-o", "addr", "show"], { encoding: "utf8" }).split("\n").filter(Boolean)
    .map((line) => line.split(/\s+/).slice(1, 4).join(" ")).sort();
}

/** What the peer's listener at `address` says. */
function readPeer(address: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    const socket = connect(port, address);
    socket.setEncoding("utf8").on("data", (chunk: string) => (text += chunk));
    socket.once("close", () => resolve(text)).once("error", reject);
  });
}

describe("the egress tests' peer host", () => {
  it("answers on its public and its private address, and changes no address of the host's", async () => {
    const before = hostAddresses();
    const peer = await startPeerHost("the peer host's own test");
    if (!peer) return; // skipped loudly (or thrown in CI) by startPeerHost
    try {
      assert.deepEqual(hostAddresses(), before, "the peer host added an address to the host's namespace");
      assert.equal(await readPeer(peer.publicAddress, peer.port), "peer");
      assert.equal(await readPeer(peer.privateAddress, peer.port), "peer");
    } finally {
      peer.close();
    }
    assert.deepEqual(hostAddresses(), before);
  });
});
