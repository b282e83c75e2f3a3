/**
 * The real parts the sandbox tests need: a working bubblewrap jail on this machine, and a peer host in a
 * network namespace of the test's own (a "public" and a private address behind a veth pair), so that
 * egress is proven against a real listener without sending anything off this machine.
 */
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createLogger } from "../../server/log.ts";
import { createSandbox } from "../../server/sandbox/mod.ts";

const REQUIRED = process.env.RUNPLANE_TEST_REQUIRE_SANDBOX === "1";

let probed: Promise<string | null> | undefined;

function skipLoudly(what: string, problem: string): false {
  const message = `${what}: ${problem}`;
  if (REQUIRED) throw new Error(`${message}, and RUNPLANE_TEST_REQUIRE_SANDBOX=1 requires it`);
  console.error(
    `\n*** SKIPPED ${message}.\n*** Install bubblewrap, slirp4netns and python3-seccomp (apt-get install bubblewrap slirp4netns python3-seccomp)\n`
      + `*** and run as root (network namespaces); RUNPLANE_TEST_REQUIRE_SANDBOX=1 fails instead of skipping.\n`,
  );
  return false;
}

/** Whether the complete sandbox runs here; otherwise says loudly that `what` was skipped (or throws in CI). */
export async function sandboxWorks(what: string): Promise<boolean> {
  probed ??= createSandbox("auto", { logger: createLogger({ level: "silent" }) }).then((sandbox) => {
    sandbox.close();
    return sandbox.status.jailed && sandbox.status.problems.length === 0
      ? null
      : sandbox.status.problems.join("; ");
  });
  const problem = await probed;
  return problem === null ? true : skipLoudly(what, problem);
}

/** A listener in a network namespace of its own, reached from the host through a veth pair. */
export interface PeerHost {
  /** An address outside every blocked range (TEST-NET-2, routed to the peer by this machine alone). */
  publicAddress: string;
  /** A private address of the same peer. */
  privateAddress: string;
  /** The port its listener answers on: it writes `peer` and closes. */
  port: number;
  close(): void;
}

function ip(...args: string[]): void {
  execFileSync("ip", args, { stdio: ["ignore", "ignore", "pipe"] });
}

/** Starts the peer host, or returns null (after a loud skip) where network namespaces cannot be made. */
export async function startPeerHost(what: string): Promise<PeerHost | null> {
  if (process.getuid?.() !== 0) return skipLoudly(what, "network namespaces need root") || null;
  let problem = "";
  // Three tries with new names: a link made a moment ago was once not found (other tests make namespaces too).
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await makePeerHost();
    } catch (error) {
      problem = (error as Error).message;
    }
  }
  return skipLoudly(what, `the peer host could not be made (${problem})`) || null;
}

/**
 * The peer's namespace is held by its listener's process (`unshare --net`), not by a mount under
 * /run/netns: named namespaces are bind mounts, and other tests' mount namespaces (the jails'
 * slirp4netns sandboxes among them) could take such a mount away under a concurrent test run.
 */
async function makePeerHost(): Promise<PeerHost> {
  const id = randomBytes(3).toString("hex");
  const [host, peer] = [`rph${id}`, `rpp${id}`];
  const octet = 16 + (parseInt(id, 16) % 200);
  const publicAddress = `198.51.100.${octet + 1}`;
  const privateAddress = `10.213.${octet}.2`;
  const port = 8099;
  const server = [
    "import socket",
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
    `s.bind(("0.0.0.0", ${port})); s.listen(64); print("ready", flush=True)`,
    "while True:",
    "    c, _ = s.accept(); c.sendall(b'peer'); c.close()",
  ].join("\n");
  const listener = spawn("unshare", ["--net", "python3", "-c", server], { stdio: ["ignore", "pipe", "inherit"] });
  const close = () => {
    listener.kill("SIGKILL"); // its namespace, and the veth's end in it, go with it
    try {
      ip("link", "del", host);
    } catch {
      // Gone with the namespace.
    }
  };
  try {
    await new Promise<void>((resolve, reject) => {
      listener.stdout!.once("data", () => resolve());
      listener.once("error", reject);
      listener.once("exit", (code) => reject(new Error(`the peer's listener exited with code ${code}`)));
    });
    const inPeer = (...args: string[]) =>
      execFileSync("nsenter", ["-t", String(listener.pid), "-n", "ip", ...args], {
        stdio: ["ignore", "ignore", "pipe"],
      });
    ip("link", "add", host, "type", "veth", "peer", "name", peer);
    ip("link", "set", peer, "netns", String(listener.pid));
    ip("addr", "add", `198.51.100.${octet}/32`, "dev", host);
    ip("addr", "add", `10.213.${octet}.1/24`, "dev", host);
    ip("link", "set", host, "up");
    ip("route", "add", `${publicAddress}/32`, "dev", host);
    inPeer("addr", "add", `${publicAddress}/32`, "dev", peer);
    inPeer("addr", "add", `${privateAddress}/24`, "dev", peer);
    inPeer("link", "set", peer, "up");
    inPeer("link", "set", "lo", "up");
    inPeer("route", "add", `198.51.100.${octet}/32`, "dev", peer);
    inPeer("route", "add", "default", "via", `198.51.100.${octet}`, "dev", peer, "onlink");
  } catch (error) {
    close();
    throw error;
  }
  return { publicAddress, privateAddress, port, close };
}
