/**
 * Who a jailed process is on the host, and the small files that name it inside. A root server gives each
 * project a uid of its own, so that a process that escaped its jail still finds the data dir (0700, the
 * server's) unreadable and other projects' processes not its own.
 */
import { createHash } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Identity, INSIDE_UID, SANDBOX_HOME, type SupportFiles } from "./_policy.ts";

/** The first uid handed to projects; far above any uid a distribution or an operator allocates. */
const PROJECT_UID_BASE = 1_000_000_000;
/** How many uids projects are spread over (2^24: two projects share one with odds of about 1 in 30,000 at 100). */
const PROJECT_UID_RANGE = 1 << 24;

/** Whether this process runs as root (then jailed processes run as the projects' own uids). */
export function serverIsRoot(): boolean {
  return process.getuid?.() === 0;
}

/**
 * The first uid handed to the builders of shared layers (`layerBuilder`): a range of their own, above the
 * projects', so that no tenant's process ever runs as the uid that owns a layer every project reads.
 */
const LAYER_UID_BASE = PROJECT_UID_BASE + PROJECT_UID_RANGE;
const LAYER_PREFIX = "layer:";

/**
 * The principal that builds the shared layer `digest` (a virtualenv, an image layer): not a project, so the
 * layer's files belong to a uid that no tenant runs as. Project ids cannot hold `:`, so none is mistaken for it.
 */
export function layerBuilder(digest: string): string {
  return `${LAYER_PREFIX}${digest.replace(/^sha256:/, "")}`;
}

/**
 * The identity of `principal`'s jailed processes (a project id, or a `layerBuilder`): a stable uid derived
 * from it when the server is root.
 */
export function identityFor(principal: string): Identity {
  if (!serverIsRoot()) return { kind: "user" };
  const hash = createHash("sha256").update(principal).digest().readUInt32BE(0);
  const base = principal.startsWith(LAYER_PREFIX) ? LAYER_UID_BASE : PROJECT_UID_BASE;
  const uid = base + (hash % PROJECT_UID_RANGE);
  return { kind: "root", uid, gid: uid };
}

/** The uid a process has inside its sandbox. */
function insideUid(identity: Identity): number {
  if (identity.kind === "inside-root") return 0;
  return identity.kind === "root" ? identity.uid : INSIDE_UID;
}

/** Whether process `pid` exists (EPERM: another user's, alive); what a leftover folder's pid is checked with. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * The folder of the sandbox's host-side files: generated `/etc` files and the sockets of custom runtimes.
 * Named with the server's pid, so that a later server removes the folders of servers that were killed.
 */
export class SupportDir {
  readonly path: string;
  readonly #passwd = new Map<number, SupportFiles>();

  constructor() {
    const prefix = "runplane-sandbox-";
    for (const name of readdirSync(tmpdir())) {
      const pid = Number(name.slice(prefix.length).split("-")[0]);
      if (name.startsWith(prefix) && Number.isInteger(pid) && pid !== process.pid && !isAlive(pid)) {
        rmSync(join(tmpdir(), name), { recursive: true, force: true });
      }
    }
    this.path = mkdtempSync(join(tmpdir(), `${prefix}${process.pid}-`));
    // Searchable by the projects' uids (their socket folders are inside), listable by the server alone.
    chmodSync(this.path, 0o711);
    writeFileSync(join(this.path, "hosts"), "127.0.0.1 localhost runplane\n::1 localhost runplane\n");
    // slirp4netns's resolver: it forwards to the host's (the host's own resolver itself is out of reach).
    writeFileSync(join(this.path, "resolv.conf"), "nameserver 10.0.2.3\n");
  }

  /** The generated files for `identity`: a passwd and group that name its uid `runplane` and nothing of the host. */
  files(identity: Identity): SupportFiles {
    const uid = insideUid(identity);
    let files = this.#passwd.get(uid);
    if (!files) {
      const dir = join(this.path, `etc-${uid}`);
      mkdirSync(dir, { recursive: true });
      const passwd = join(dir, "passwd");
      const group = join(dir, "group");
      writeFileSync(
        passwd,
        `root:x:0:0:root:/root:/usr/sbin/nologin\nrunplane:x:${uid}:${uid}:runplane:${SANDBOX_HOME}:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n`,
      );
      writeFileSync(group, `root:x:0:\nrunplane:x:${uid}:\nnogroup:x:65534:\n`);
      files = { passwd, group, hosts: join(this.path, "hosts"), resolvConf: join(this.path, "resolv.conf") };
      this.#passwd.set(uid, files);
    }
    return files;
  }

  /** Removes the folder (the server is stopping). */
  remove(): void {
    rmSync(this.path, { recursive: true, force: true });
  }
}
