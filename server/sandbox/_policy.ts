/**
 * The sandbox's policy, written down in one place with the reason for each rule (Flatpak's way in
 * `flatpak-run.c`): the bubblewrap arguments that jail one process. Nothing here starts anything.
 */
import { existsSync, lstatSync, readlinkSync } from "node:fs";
import { hostDropPrivileges, setprivOptions } from "./_host_setpriv.ts";

/** What a jail whose `/` is an image is: an unpacked root file system of the image store. */
export interface ImageRoot {
  /**
   * The absolute host path of the unpacked root (`<data>/images/roots/sha256-<hex>`). Read-only, it is
   * shared by every replica of every image digest's users, and the server adds the empty mount points the
   * jail needs to it; so a root given read-only is never given writable, nor the other way round.
   */
  root: string;
  /**
   * A build step's own copy of a root, which it writes as uid 0 of a user namespace of its own (apt,
   * dpkg): capabilities inside that namespace only, its files owned on the host by the principal's uid (a
   * root server) or the server's (otherwise). Its `/etc/passwd` and `/etc/group` are the image's own.
   */
  writable?: boolean;
}

/** What one jailed process may see and do. */
export interface JailSpec {
  /**
   * The project whose code runs: with a root server its processes get that project's own uid. A shared
   * layer's build names its `layerBuilder` instead, whose uid no tenant's process ever has.
   */
  projectId: string;
  /** Host paths bound read-only at the same path inside (the app folder, its virtualenv). */
  readOnly?: string[];
  /** Host paths bound writable at the same path inside (a build's deployment folder or virtualenv). */
  writable?: string[];
  /**
   * Host folders shown at a path of their own inside, read-only or writable: a project's volumes. The
   * spawner opens each `source` without following a link at its last step (`bindFds`), so a folder replaced
   * by a link is refused, not followed; the folders above it must be the server's.
   */
  mounts?: JailMount[];
  /** The working directory inside. */
  cwd: string;
  /** Whether the process reaches public addresses (through slirp4netns); never the host's or private ones. */
  egress: boolean;
  /** The environment on top of the basics (`baseEnvironment`): the app's `[env]`, its secrets. */
  env: Record<string, string>;
  /**
   * The most bytes each of its private tmpfs folders (`/tmp` and HOME) may hold; unbounded when absent.
   * Their pages count toward the memory limit of the process's cgroup as well.
   */
  tmpBytes?: number;
  /**
   * Host device nodes shown inside (`--dev-bind`), such as a replica's GPUs: the jail's `/dev` holds
   * only the basics (`null`, `zero`, `random`, a pty) and these. Their own file modes decide who opens them.
   */
  devices?: Array<{ source: string; target: string }>;
  /**
   * The image whose root file system is the process's `/` instead of the host's system, under the same
   * jail (see `ImageRoot`): its `/usr`, `/etc`… are the image's, with the jail's generated `/etc` files,
   * `/proc`, `/dev`, `/tmp`, HOME, and `readOnly` / `writable` at their host paths. Unjailed, it is refused.
   */
  image?: ImageRoot;
  /**
   * Host files shown read-only in an image jail at `HOST_LIBRARIES` under their own names, which the
   * dynamic loader finds first (`LD_LIBRARY_PATH`): a GPU driver's user-space libraries (`libcuda.so.1`,
   * `libnvidia-ml.so.1`…), which must match the host's kernel driver, not the image. Each must be an
   * absolute path to a plain file (no link: pass the file a link names), shown under its own name or the
   * `name` given (a driver's `libcuda.so.550.54.14` as its soname, `libcuda.so.1`). Refused outside an image.
   */
  hostLibraries?: Array<string | HostFile>;
  /**
   * Host programs shown read-only in an image jail at `HOST_PROGRAMS` (a driver's `nvidia-smi`), which is
   * added at the end of `PATH`: the image's own commands come first. Plain files, as `hostLibraries`.
   */
  hostPrograms?: HostFile[];
}

/** A host folder shown inside a jail at `target` (an absolute path), writable unless `readOnly`. */
export interface JailMount {
  source: string;
  target: string;
  readOnly: boolean;
}

/** A host file shown in an image jail under `name` (a plain file name), not its own. */
export interface HostFile {
  /** The absolute host path of a plain file (not a link). */
  file: string;
  name: string;
}

/** Who the jailed process is on the host. */
export type Identity =
  /** The server runs as root: bubblewrap runs as root without a user namespace, and `setpriv` drops to uid. */
  | { kind: "root"; uid: number; gid: number }
  /** An unprivileged server: bubblewrap makes a user namespace in which the process is uid 1000. */
  | { kind: "user" }
  /**
   * A writable image root's build step: uid 0 with a few file capabilities inside a user namespace of its
   * own, which bubblewrap makes running as `host` (a root server drops to the principal's uid first with the
   * host's setpriv) or as the unprivileged server itself. Outside that namespace it is that uid and no more.
   */
  | { kind: "inside-root"; host?: { uid: number; gid: number } };

/** The uid and gid a process has inside a user namespace made by an unprivileged server. */
export const INSIDE_UID = 1000;

/** Where the generated `/etc` files and the per-uid `passwd` are kept on the host. */
export interface SupportFiles {
  passwd: string;
  group: string;
  hosts: string;
  resolvConf: string;
}

/**
 * The descriptor numbers bubblewrap reads (the spawner places them in the child's stdio). `info` and
 * `block` come together, only when the server sets something up (the network) before the command runs.
 */
export interface PolicyFds {
  seccomp?: number;
  info?: number;
  block?: number;
}

/** Parts of `/etc` a runtime needs: certificates, the resolver's rules, the dynamic linker's cache, time. */
const ETC_READ_ONLY = [
  "/etc/ssl",
  "/etc/ca-certificates",
  "/etc/ca-certificates.conf",
  "/etc/pki",
  "/etc/crypto-policies",
  "/etc/alternatives",
  "/etc/ld.so.cache",
  "/etc/ld.so.conf",
  "/etc/ld.so.conf.d",
  "/etc/localtime",
  "/etc/timezone",
  "/etc/nsswitch.conf",
  "/etc/host.conf",
  "/etc/gai.conf",
  "/etc/protocols",
  "/etc/services",
  "/etc/mime.types",
  "/etc/os-release",
  "/etc/debian_version",
  "/etc/python3",
  "/etc/python3.11",
  "/etc/python3.12",
  "/etc/python3.13",
];

/** Top-level system folders: bound read-only, or recreated as the symlinks they are on merged-/usr systems. */
const SYSTEM_ROOTS = ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/** The system's arguments, made once: the host's layout does not change while serving. */
let systemArgsMade: string[] | undefined;

function systemArgs(): string[] {
  systemArgsMade ??= makeSystemArgs();
  return systemArgsMade;
}

function makeSystemArgs(): string[] {
  // /usr holds the interpreters and libraries; /usr/local the operator's own installs.
  const args = ["--ro-bind", "/usr", "/usr"];
  for (const root of SYSTEM_ROOTS) {
    const stat = lstatSync(root, { throwIfNoEntry: false });
    if (stat?.isSymbolicLink()) args.push("--symlink", readlinkSync(root), root);
    else if (stat?.isDirectory()) args.push("--ro-bind", root, root);
  }
  // Made first and searchable: bubblewrap would otherwise make /etc for the first file bound into it 0700.
  args.push("--perms", "0755", "--dir", "/etc");
  for (const path of ETC_READ_ONLY.filter((path) => existsSync(path))) args.push("--ro-bind", path, path);
  return args;
}

/**
 * `--dir` for each folder above `path` not made yet, searchable by everyone: bubblewrap would make them
 * 0700 for a bind below them, which a root bubblewrap's unprivileged child could not traverse.
 */
function parentDirs(path: string, made: Set<string>): string[] {
  const args: string[] = [];
  const parts = path.split("/").filter(Boolean);
  for (let i = 1; i < parts.length; i++) {
    const dir = `/${parts.slice(0, i).join("/")}`;
    if (made.has(dir)) continue;
    made.add(dir);
    args.push("--perms", "0755", "--dir", dir);
  }
  return args;
}

/** The fixed environment every jailed process starts from (nothing of the server's own). */
export function baseEnvironment(options: { home: string; path?: string }): Record<string, string> {
  return {
    PATH: options.path ?? "/usr/local/bin:/usr/bin:/bin",
    HOME: options.home,
    USER: "runplane",
    LOGNAME: "runplane",
    LANG: "C.UTF-8",
    TZ: process.env.TZ ?? "UTC",
    TMPDIR: "/tmp",
  };
}

/** HOME inside the sandbox: a private tmpfs. */
export const SANDBOX_HOME = "/home/runplane";

/**
 * The capabilities a build step keeps as uid 0 of its own user namespace: what dpkg and apt use on files
 * (ownership, modes, reading and writing whatever root may). Not CAP_NET_ADMIN (it could remove the prohibit
 * routes of its network namespace, which its user namespace owns), not CAP_SYS_ADMIN, nor any other.
 */
const INSIDE_ROOT_CAPS = [
  "CAP_CHOWN",
  "CAP_DAC_OVERRIDE",
  "CAP_DAC_READ_SEARCH",
  "CAP_FOWNER",
  "CAP_FSETID",
  "CAP_SETUID",
  "CAP_SETGID",
  "CAP_KILL",
];

/** How a jail's `/` is laid out when it is not the host's system: an image root (`_image_root.ts`). */
export interface RootLayout {
  /** The arguments that replace the host system's `/usr`, `/bin`, `/etc`… */
  system: string[];
  /** Whether `path`'s mount point already lies in the root: bubblewrap is then given no `--dir` for its parents. */
  inImage(path: string): boolean;
  /** Whether `/` (a tmpfs holding the image's entries) is remounted read-only once every mount point is on it. */
  readOnlyRoot: boolean;
  /** Folders covered by a tmpfs of their own, remounted read-only with `/`. */
  covered?: string[];
}

/** A private tmpfs at `path`, writable by everyone (sticky), of at most `bytes` when given. */
function tmpfs(path: string, bytes: number | undefined): string[] {
  const size = bytes === undefined ? [] : ["--size", String(Math.floor(bytes))];
  return ["--perms", "1777", ...size, "--tmpfs", path];
}

/**
 * The bubblewrap arguments that jail `command`, up to and including the `--` before it. With a root
 * identity the command must be prefixed by `dropPrivileges(identity)`.
 */
export function bubblewrapArgs(
  spec: JailSpec,
  options: {
    identity: Identity;
    files: SupportFiles;
    fds: PolicyFds;
    /** The image root's layout; the host's system when absent. */
    layout?: RootLayout;
    /** Descriptors (opened by the server) to bind instead of these host paths: bubblewrap cannot reach them. */
    bindFds?: Map<string, number>;
  },
): string[] {
  const { identity, files, fds, layout } = options;
  if ((spec.hostLibraries?.length || spec.hostPrograms?.length) && !(spec.image && !spec.image.writable)) {
    throw new Error("Host libraries are shown only in a read-only image jail (the host's system has its own)");
  }
  const args = [
    // Its own pid, ipc, uts, cgroup and network namespaces: no host process is visible or signalled, no
    // host socket or abstract Unix socket is reachable (a network comes only through slirp4netns).
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--unshare-net",
    "--hostname",
    "runplane",
    // Killed with the server, even by SIGKILL; a new session so that TIOCSTI cannot reach a terminal.
    "--die-with-parent",
    "--new-session",
    ...(layout?.system ?? systemArgs()),
    // Generated, not the host's: no host accounts, no host names, the resolver of the sandbox's network. A
    // build step that is root keeps its image's accounts, which it may add to (a package's postinst).
    ...(identity.kind === "inside-root"
      ? []
      : ["--ro-bind", files.passwd, "/etc/passwd", "--ro-bind", files.group, "/etc/group"]),
    "--ro-bind",
    files.hosts,
    "/etc/hosts",
    ...(spec.egress ? ["--ro-bind", files.resolvConf, "/etc/resolv.conf"] : []),
    // Its own /proc (its own processes only), a minimal /dev, private writable /tmp and HOME (bounded
    // when the spec says so: a full /tmp is ENOSPC for the app, not the host's memory).
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    // The replica's own GPUs and the driver's shared nodes, no other GPU's. No devices cgroup is needed:
    // a node that is not in the jail's /dev cannot be opened (and no process inside may mknod).
    ...(spec.devices ?? []).flatMap((device) => ["--dev-bind", device.source, device.target]),
    ...tmpfs("/tmp", spec.tmpBytes),
    ...tmpfs(SANDBOX_HOME, spec.tmpBytes),
  ];
  const made = new Set(["/", "/etc", "/tmp", "/home", SANDBOX_HOME]);
  const bind = (path: string, how: "--ro-bind" | "--bind") => {
    const parents = layout?.inImage(path) ? [] : parentDirs(path, made);
    const fd = options.bindFds?.get(path);
    args.push(...parents, ...(fd === undefined ? [how, path, path] : [`${how}-fd`, String(fd), path]));
  };
  // Before the binds at host paths, so that none of those can be hidden by a folder the tenant writes.
  for (const mount of spec.mounts ?? []) {
    const how = mount.readOnly ? "--ro-bind" : "--bind";
    const parents = layout?.inImage(mount.target) ? [] : parentDirs(mount.target, made);
    const fd = options.bindFds?.get(mount.source);
    args.push(...parents, ...(fd === undefined ? [how, mount.source] : [`${how}-fd`, String(fd)]), mount.target);
  }
  for (const path of spec.readOnly ?? []) bind(path, "--ro-bind");
  for (const path of spec.writable ?? []) bind(path, "--bind");
  if (layout?.readOnlyRoot) {
    for (const folder of layout.covered ?? []) args.push("--remount-ro", folder);
    args.push("--remount-ro", "/");
  }
  args.push("--chdir", spec.cwd);
  if (identity.kind === "user") {
    // A user namespace of its own, as an ordinary uid, and no further namespaces inside it.
    args.push("--unshare-user", "--uid", String(INSIDE_UID), "--gid", String(INSIDE_UID), "--disable-userns");
    args.push("--cap-drop", "ALL");
  } else if (identity.kind === "inside-root") {
    // No --disable-userns: its nested user namespace would not own the network namespace, which slirp4netns
    // then cannot enter. The seccomp filter refuses new user namespaces (clone, unshare) all the same.
    args.push("--unshare-user", "--uid", "0", "--gid", "0", "--cap-drop", "ALL");
    for (const cap of INSIDE_ROOT_CAPS) args.push("--cap-add", cap);
  } else {
    // bubblewrap runs as root (it alone can bind folders of the 0700 data dir); setpriv, the first thing
    // it runs, drops to the project's uid with no capabilities, bounding set included.
    args.push("--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP");
  }
  if (fds.seccomp !== undefined) args.push("--seccomp", String(fds.seccomp));
  // The spawner reads the child's pid from info and sets up its network; bubblewrap holds the command on
  // block until then, unless the command waits for it itself (`SandboxSpawnOptions.networkGate`).
  if (fds.info !== undefined) args.push("--info-fd", String(fds.info));
  if (fds.block !== undefined) args.push("--block-fd", String(fds.block));
  args.push("--");
  return args;
}

/**
 * The command prefix that turns a root bubblewrap's child into the project's unprivileged uid. In a jail whose
 * `/` is an image (`image`), it is the host's setpriv through the host's loader, never a binary of the image.
 */
export function dropPrivileges(identity: Identity, options: { image?: boolean } = {}): string[] {
  if (identity.kind !== "root") return [];
  if (options.image) return hostDropPrivileges(identity);
  return ["/usr/bin/setpriv", ...setprivOptions(identity)];
}
