/**
 * The real parts the sandbox tests need: a working bubblewrap jail on this machine, and a peer host in a
 * network namespace of the test's own (a "public" and a private address behind a veth pair), so that
 * egress is proven against a real listener without sending anything off this machine.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { createLogger } from "../../server/log.ts";
import { createSandbox, type JailSpec, type Sandbox, type SandboxStatus } from "../../server/sandbox/mod.ts";

const REQUIRED = process.env.RUNPLANE_TEST_REQUIRE_SANDBOX === "1";

let probed: Promise<SandboxStatus> | undefined;

/** What `RUNPLANE_SANDBOX=auto` finds on this machine, probed once per test process. */
function autoSandbox(): Promise<SandboxStatus> {
  probed ??= createSandbox("auto", { logger: createLogger({ level: "silent" }) }).then((sandbox) => {
    sandbox.close();
    return sandbox.status;
  });
  return probed;
}

/**
 * The `RUNPLANE_SANDBOX` a test server runs with unless its test sets one: `auto` (the default) where a
 * jail works here, so that tests run jailed as production does; `off` where none does, since `auto`
 * without a jail refuses deployments, which most tests make (test/deployments/without_jail_test.ts
 * covers that refusal).
 */
export async function testServerSandbox(): Promise<"auto" | "off"> {
  return (await autoSandbox()).jailed ? "auto" : "off";
}

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
  const status = await autoSandbox();
  return status.jailed && status.problems.length === 0 ? true : skipLoudly(what, status.problems.join("; "));
}

/** The peer's gateway: an address of TEST-NET-2 that nothing owns, resolved to the host's end of the veth. */
const GATEWAY = "198.51.100.1";

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
    // The host's end has no address, not even IPv6's link-local one (addrgenmode none): routes alone reach
    // the peer. An address added or removed in the host's namespace makes Chromium fail the page loads in
    // flight in the browser tests beside this one with net::ERR_NETWORK_CHANGED (it watches addresses,
    // not routes); a dashboard test in a .ci/run met that. The host's packets leave with another address.
    ip("link", "set", host, "addrgenmode", "none");
    ip("link", "set", host, "up");
    ip("route", "add", `${publicAddress}/32`, "dev", host);
    ip("route", "add", `10.213.${octet}.0/24`, "dev", host);
    inPeer("addr", "add", `${publicAddress}/32`, "dev", peer);
    inPeer("addr", "add", `${privateAddress}/24`, "dev", peer);
    inPeer("link", "set", peer, "up");
    inPeer("link", "set", "lo", "up");
    // Every answer goes to the host's end by its hardware address (a gateway no one needs to own), so the
    // peer never asks the host's ARP for the address the host wrote from.
    const hostMac = readFileSync(`/sys/class/net/${host}/address`, "utf8").trim();
    inPeer("neigh", "add", GATEWAY, "lladdr", hostMac, "dev", peer, "nud", "permanent");
    inPeer("route", "add", "default", "via", GATEWAY, "dev", peer, "onlink");
  } catch (error) {
    close();
    throw error;
  }
  return { publicAddress, privateAddress, port, close };
}

/** How a test takes the jail away from a server: bubblewrap gone, or a bubblewrap that exits 1. */
export type JailTakenAway = "missing" | "failing";

/** Runs `$@` after binding `$1` over every bubblewrap the server's lookup (PATH, then /usr/bin and /bin) finds. */
const HIDE_BWRAP = [
  'hide="$1"; shift',
  'for dir in $(echo "$PATH" | tr ":" " ") /usr/bin /bin; do',
  '  if [ -e "$dir/bwrap" ]; then mount --bind "$hide" "$dir/bwrap"; fi',
  "done",
  'exec "$@"',
].join("\n");

/** What `startServerProcess` needs to start a server without a working jail: its `wrap` and its `PATH`. */
export interface WithoutJail {
  wrap(argv: string[]): string[];
  env: { PATH: string };
}

/**
 * Takes the jail away from a server process for real: the server runs in a private mount namespace where
 * `/dev/null` (not a file: the lookup skips it) or a script that exits 1 is bound over every bubblewrap,
 * and (`failing`) that script is first on its PATH, so it is what it finds even where none is installed.
 * A PATH alone could not hide one: the server also looks in /usr/bin and /bin. `dir` holds the script.
 * Returns null after a loud skip where mount namespaces cannot be made (they need root and `unshare`).
 */
export async function withoutJail(what: string, options: { how: JailTakenAway; dir: string }): Promise<
  WithoutJail | null
> {
  if (process.getuid?.() !== 0) return skipLoudly(what, "hiding bubblewrap in a mount namespace needs root") || null;
  try {
    execFileSync("unshare", ["--mount", "--propagation", "private", "true"], { stdio: ["ignore", "ignore", "pipe"] });
  } catch (error) {
    return skipLoudly(what, `unshare cannot make a mount namespace here (${(error as Error).message})`) || null;
  }
  const failing = join(options.dir, "bin", "bwrap");
  await mkdir(dirname(failing), { recursive: true });
  await writeFile(failing, "#!/bin/sh\necho 'bwrap: this one never works' >&2\nexit 1\n", { mode: 0o755 });
  const hide = options.how === "missing" ? "/dev/null" : failing;
  const path = options.how === "missing" ? process.env.PATH ?? "" : `${dirname(failing)}:${process.env.PATH ?? ""}`;
  return {
    wrap: (argv) => ["unshare", "--mount", "--propagation", "private", "sh", "-c", HIDE_BWRAP, "sh", hide, ...argv],
    env: { PATH: path },
  };
}

/** What a jailed command did: its exit code and everything it printed. */
export interface JailedOutcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Waits for `child` to end, collecting its output. */
export function collectOutput(child: ChildProcess): Promise<JailedOutcome> {
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (text: string) => (stdout += text));
  child.stderr!.setEncoding("utf8").on("data", (text: string) => (stderr += text));
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
}

/**
 * Runs `command` (argv) in `sandbox`'s jail: project `projectId`, working directory `/`, no egress and no
 * environment of its own unless `spec` says otherwise.
 */
export function runJailed(
  sandbox: Sandbox,
  command: string[],
  spec: Partial<JailSpec> & { projectId: string },
): Promise<JailedOutcome> {
  const child = sandbox.spawn(command[0]!, command.slice(1), {
    jail: { cwd: "/", egress: false, env: {}, ...spec },
    stdio: ["ignore", "pipe", "pipe"],
  });
  return collectOutput(child);
}
