/**
 * The network of a jailed process with egress: slirp4netns gives its namespace a user-mode stack (a
 * tap device, 10.0.2.100, gateway 10.0.2.2, resolver 10.0.2.3) whose connections leave as the host's
 * own sockets. `--disable-host-loopback` keeps 10.0.2.2 from reaching the host's 127.0.0.1; routes of
 * type `prohibit` inside the namespace refuse private, link-local, shared and reserved ranges and the
 * host's own addresses before a packet leaves (connect fails with EACCES). The jailed process has no
 * capability in its namespace, so it can change neither.
 */
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { networkInterfaces } from "node:os";

/**
 * IPv4 ranges a jailed process never reaches (IPv6 is off: slirp4netns runs without it). slirp4netns's
 * own 10.0.2.0/24 stays reachable through its more specific route: 10.0.2.3 is the resolver, and 10.0.2.2
 * answers nothing with host loopback disabled.
 */
export const BLOCKED_RANGES = [
  "0.0.0.0/8", // "this network"
  "10.0.0.0/8", // private
  "100.64.0.0/10", // carrier-grade NAT, cloud-internal addresses
  "127.0.0.0/8", // loopback (the namespace's own lo answers first anyway)
  "169.254.0.0/16", // link-local: cloud metadata at 169.254.169.254
  "172.16.0.0/12", // private
  "192.0.0.0/24", // IETF protocol assignments
  "192.168.0.0/16", // private
  "198.18.0.0/15", // benchmarking
  "224.0.0.0/4", // multicast
  "240.0.0.0/4", // reserved, broadcast
];

/** The host's own IPv4 addresses outside the blocked ranges (a public address of the host is still the host). */
export function hostAddresses(): string[] {
  const addresses = Object.values(networkInterfaces()).flatMap((list) =>
    (list ?? []).filter((a) => a.family === "IPv4" && !a.internal).map((a) => `${a.address}/32`)
  );
  return [...new Set(addresses)];
}

/** Runs a process to the end; rejects with its stderr unless it exits 0. */
function runToEnd(command: string, args: string[], input?: string): Promise<void> {
  return new Promise((resolve, reject) => {
    // In a group of its own, like the replicas: a signal to the server's group must not reach it.
    const child = spawn(command, args, { stdio: ["pipe", "ignore", "pipe"], detached: true });
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text));
    child.once("error", reject);
    child.once("close", (code) => {
      if (code === 0) resolve();
      else reject(new Error(`${command} exited with code ${code}: ${stderr.trim()}`));
    });
    child.stdin.on("error", () => undefined); // the exit code tells what went wrong
    child.stdin.end(input ?? "");
  });
}

/** How `attachNetwork` enters a namespace: a root server directly, another through the user namespace it made. */
function enterArgs(pid: number, asRoot: boolean): string[] {
  return asRoot
    ? [`--net=/proc/${pid}/ns/net`]
    : ["-t", String(pid), "-U", "-n", "--preserve-credentials"];
}

/**
 * Resolves once bubblewrap's child has given its namespace a loopback address. bubblewrap reports the
 * child's pid before the child sets up `lo`; configuring the namespace meanwhile made bubblewrap's own
 * netlink request fail now and then ("loopback: Failed RTM_NEWADDR") under load.
 */
async function loopbackReady(pid: number): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!(await readFile(`/proc/${pid}/net/fib_trie`, "utf8")).includes("127.0.0.1")) {
    if (Date.now() > deadline) throw new Error("the sandbox's loopback did not come up within 5 s");
    await sleep(1);
  }
}

/** A network attached to a jailed process; `detach()` stops its slirp4netns. */
export interface AttachedNetwork {
  detach(): void;
}

/**
 * Gives the namespace of `pid` its slirp4netns stack and its prohibit routes; resolves once both are in
 * place (the process may then be let run). `blocked` lists the ranges refused (BLOCKED_RANGES and the
 * host's addresses).
 */
export async function attachNetwork(
  pid: number,
  options: {
    asRoot: boolean;
    blocked: string[];
    /**
     * The namespace belongs to a user namespace the jail made although the server is root (a writable image
     * root's build step): the routes go in as root directly, and slirp4netns joins that user namespace first.
     */
    inChildUserns?: boolean;
  },
): Promise<AttachedNetwork> {
  // The routes touch neither lo nor tap0: they go in while bubblewrap still sets up its loopback.
  const routes = runToEnd(
    "nsenter",
    [...enterArgs(pid, options.asRoot), "ip", "-batch", "-"],
    options.blocked.map((range) => `route replace prohibit ${range}`).join("\n"),
  );
  routes.catch(() => undefined); // awaited below; a failure then stops the jail
  try {
    await loopbackReady(pid);
  } catch (error) {
    await routes.catch(() => undefined);
    throw error;
  }
  const args = [
    "--configure",
    "--mtu=65520",
    "--disable-host-loopback",
    // slirp4netns parses the tenant's packets: it runs in its own mount namespace without capabilities.
    "--enable-sandbox",
    "--enable-seccomp",
    "--ready-fd=3",
    "--exit-fd=4",
  ];
  if (!options.asRoot || options.inChildUserns) args.push(`--userns-path=/proc/${pid}/ns/user`);
  args.push(String(pid), "tap0");
  // fd 4: slirp4netns exits when this end closes (detach, or the server's death).
  // Detached like the replica it serves (Ctrl-C to the server's group must not cut a draining replica's
  // network); the exit pipe still ends it with the server.
  const slirp = spawn("slirp4netns", args, { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"], detached: true });
  const exitPipe = slirp.stdio[4] as NodeJS.WritableStream & { destroy(): void };
  const detach = () => {
    exitPipe.destroy();
    slirp.kill("SIGKILL");
  };
  let stderr = "";
  slirp.stderr!.setEncoding("utf8").on("data", (text: string) => (stderr += text));
  const ready = new Promise<void>((resolve, reject) => {
    slirp.stdio[3]!.once("data", () => resolve());
    slirp.once("error", reject);
    slirp.once("exit", (code) => reject(new Error(`slirp4netns exited with code ${code}: ${stderr.trim()}`)));
  });
  try {
    await Promise.all([ready, routes]);
  } catch (error) {
    detach();
    throw error;
  }
  slirp.stderr!.removeAllListeners("data").resume();
  return { detach };
}
