/**
 * A jail whose `/` is an unpacked image's root file system (issue 46). The root is tenant content (any
 * links, any modes), owned by the server and only ever bound read-only, so nothing tenant-run can change it.
 *
 * The jail's `/` is an empty tmpfs; each top-level entry of the image is bound on it read-only (a link is
 * recreated as the link it is, never followed on the host), except `/proc`, `/dev`, `/tmp` and `/sys`, which
 * are the jail's own (or absent), and `/.runplane`, where the host's `/usr` is bound for the privilege drop
 * (`_host_setpriv.ts`). A bind below an image folder (`/etc/passwd`, `/home/runplane`, a data-dir path under
 * `/var`) needs its mount point in the read-only image: the server makes it in the image on the host, once
 * per (root, path), with no-follow semantics throughout (each component `lstat`ed; a link or a non-folder is
 * refused with an error naming it). That is safe only because no tenant process can write the tree.
 */
import { chmodSync, closeSync, constants, lstatSync, mkdirSync, openSync, readdirSync, readlinkSync } from "node:fs";
import { basename, isAbsolute, join, normalize } from "node:path";
import { HOST_USR } from "./_host_setpriv.ts";
import { baseEnvironment, type HostFile, type ImageRoot, type JailSpec, SANDBOX_HOME } from "./_policy.ts";

export type { ImageRoot } from "./_policy.ts";

/** Top-level names of an image that the jail replaces with its own (or leaves out, like the host jail's /sys). */
const REPLACED = new Set(["proc", "dev", "tmp", "sys", ".runplane"]);

/** Mount points made, per root and path: each is made and checked once. */
const made = new Set<string>();
/** The roots used each way: one root must not be both. */
const usedReadOnly = new Set<string>();
const usedWritable = new Set<string>();

/**
 * Forgets what was made in `root`: the image cache removed it, and a root unpacked again at the same path
 * needs its mount points made anew.
 */
export function forgetImageRoot(root: string): void {
  for (const key of [...made]) if (key.startsWith(`${root}\0`)) made.delete(key);
}

/** Refuses a root that is not an absolute, normal folder path, or that was used the other way. */
export function checkImageRoot(image: ImageRoot): void {
  if (!isAbsolute(image.root) || normalize(image.root) !== image.root || image.root === "/") {
    throw new Error(`An image root must be an absolute, normal path other than /: ${JSON.stringify(image.root)}`);
  }
  const [mine, other] = image.writable ? [usedWritable, usedReadOnly] : [usedReadOnly, usedWritable];
  if (other.has(image.root)) {
    throw new Error(
      `The image root ${image.root} was used ${image.writable ? "read-only" : "writable"}; a root is one or the other`,
    );
  }
  const stat = lstatSync(image.root, { throwIfNoEntry: false });
  if (!stat?.isDirectory()) throw new Error(`The image root ${image.root} is not a folder (or is a link)`);
  mine.add(image.root);
}

/** Makes one missing component (a folder or an empty file); one that appeared meanwhile is checked by the caller. */
function makeComponent(host: string, kind: "dir" | "file"): void {
  try {
    if (kind === "dir") {
      mkdirSync(host, 0o755);
      chmodSync(host, 0o755); // made just now, by this process, in a tree nobody else writes: no link here
    } else {
      // O_EXCL and O_NOFOLLOW: never opens what is already there, a link above all.
      closeSync(
        openSync(host, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o644),
      );
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
}

/**
 * Makes `path` (inside the jail) a `kind` mount point in the image `root`, no link followed: each component
 * is `lstat`ed, a missing one made, and a link or a non-folder refused with an error naming it.
 */
export function ensureMountPoint(root: string, path: string, kind: "dir" | "file"): void {
  const key = `${root}\0${path}\0${kind}`;
  if (made.has(key)) return;
  if (!isAbsolute(path) || normalize(path) !== path || path === "/") {
    throw new Error(`A mount point in an image must be an absolute, normal path: ${JSON.stringify(path)}`);
  }
  const parts = path.split("/").filter(Boolean);
  let host = root;
  for (let i = 0; i < parts.length; i++) {
    host = join(host, parts[i]);
    const inside = `/${parts.slice(0, i + 1).join("/")}`;
    const want = i === parts.length - 1 ? kind : "dir";
    let stat = lstatSync(host, { throwIfNoEntry: false });
    if (!stat) {
      makeComponent(host, want);
      stat = lstatSync(host);
    }
    if (stat.isSymbolicLink()) {
      throw new Error(
        `The image's ${inside} is a link (to ${
          readlinkSync(host)
        }); the jail binds ${path} there, and never through a link: refused`,
      );
    }
    if (want === "dir" ? !stat.isDirectory() : !stat.isFile()) {
      throw new Error(
        `The image's ${inside} is not a ${want === "dir" ? "folder" : "file"}; the jail binds ${path} there: refused`,
      );
    }
  }
  made.add(key);
}

/**
 * Refuses a writable root in which a folder on the way to one of the jail's mount points (`/etc/hosts`, HOME,
 * `/tmp`, a bind's path…) is a link. bubblewrap makes and mounts on those paths while its own root is a tmpfs
 * holding the host's `/` at `/oldroot` and the new root at `/newroot`: a link the previous step left in its
 * copy (`/home -> /oldroot/var/tmp/x`, or `../oldroot/…`) then names a HOST path, where bubblewrap, running
 * as the principal's uid, would make folders and files (issue 46, test/sandbox/image_attacks_test.ts). Each
 * component is `lstat`ed in order and the walk stops at the first link (refused) or missing one (bubblewrap
 * makes it in a real folder), so no link is ever followed. No race: nothing writes the copy between two
 * steps (it lies in the 0700 data dir, and a step's processes die with its pid namespace).
 */
export function checkWritableMountPoints(spec: JailSpec & { image: ImageRoot }): void {
  // Every path bubblewrap makes or mounts on in the step's own copy (see `bubblewrapArgs`).
  const paths = [
    "/etc/hosts",
    ...(spec.egress ? ["/etc/resolv.conf"] : []),
    "/proc",
    "/dev",
    "/tmp",
    SANDBOX_HOME,
    ...(spec.devices ?? []).map((device) => device.target),
    ...spec.readOnly ?? [],
    ...spec.writable ?? [],
  ];
  const root = spec.image.root;
  for (const path of paths) {
    if (!isAbsolute(path) || normalize(path) !== path || path === "/") {
      throw new Error(`A mount point in an image must be an absolute, normal path: ${JSON.stringify(path)}`);
    }
    const parts = path.split("/").filter(Boolean);
    let host = root;
    for (let i = 0; i < parts.length; i++) {
      host = join(host, parts[i]);
      const stat = lstatSync(host, { throwIfNoEntry: false });
      if (!stat) break;
      const inside = `/${parts.slice(0, i + 1).join("/")}`;
      if (stat.isSymbolicLink()) {
        throw new Error(
          `The build root's ${inside} is a link; the jail mounts ${path} there, and never through a link: refused`,
        );
      }
      if (i < parts.length - 1 && !stat.isDirectory()) {
        throw new Error(`The build root's ${inside} is not a folder; the jail mounts ${path} below it: refused`);
      }
    }
  }
}

/** The image's top-level entries, as they are (never followed). */
function topLevel(root: string): Map<string, "dir" | "file" | "link"> {
  const entries = new Map<string, "dir" | "file" | "link">();
  for (const entry of readdirSync(root, { withFileTypes: true })) {
    if (entry.isSymbolicLink()) entries.set(entry.name, "link");
    else if (entry.isDirectory()) entries.set(entry.name, "dir");
    else if (entry.isFile()) entries.set(entry.name, "file");
    // Sockets, fifos and device nodes of an image are left out.
  }
  return entries;
}

/**
 * The image folders on the way to `paths` (host paths bound at the same path) that others may not search,
 * such as an image's `/root` (0700) above a checkout in `/root/…`: the replica's uid could not reach its
 * bind through them. Each is covered in the jail by an empty tmpfs the binds' folders are made in — hiding
 * nothing the replica could read, since it could not search the folder. A walk stops at a missing component
 * (made by `ensureMountPoint`, searchable) and at a link (refused there); none is followed.
 */
function unsearchableFolders(root: string, paths: readonly string[]): string[] {
  const found = new Set<string>();
  for (const path of paths) {
    const parts = path.split("/").filter(Boolean);
    for (let i = 0; i < parts.length - 1; i++) {
      const inside = `/${parts.slice(0, i + 1).join("/")}`;
      if (REPLACED.has(parts[0]!)) break;
      const stat = lstatSync(join(root, inside), { throwIfNoEntry: false });
      if (!stat?.isDirectory()) break;
      if ((stat.mode & 0o001) === 0) {
        found.add(inside);
        break;
      }
    }
  }
  return [...found];
}

/** Whether `path` is `folder` or below it. */
function within(path: string, folder: string): boolean {
  return path === folder || path.startsWith(`${folder}/`);
}

/** How a read-only image root is laid out: bubblewrap's arguments for it, and which paths lie in the image. */
export interface ImageRootLayout {
  /** The arguments that replace the host system's (`/usr`, `/etc`…): the image's entries and the host's /usr. */
  system: string[];
  /** Whether `path`'s mount point lies in an image folder (made there already: bubblewrap makes no parents). */
  inImage(path: string): boolean;
  /** Always true: the tmpfs `/` is remounted read-only at the end. */
  readOnlyRoot: true;
  /** Image folders others may not search, each covered by an empty tmpfs (remounted read-only at the end). */
  covered: string[];
}

/**
 * The read-only layout of `spec.image`, with every mount point the jail binds below an image folder made
 * first: `/etc`'s generated files, HOME, and `spec.readOnly` / `spec.writable` at their host paths.
 */
export function readOnlyImageRoot(spec: JailSpec & { image: ImageRoot }): ImageRootLayout {
  const root = spec.image.root;
  checkImageRoot(spec.image);
  const entries = topLevel(root);
  const binds = [...spec.readOnly ?? [], ...spec.writable ?? []];
  const targets = (spec.mounts ?? []).map((mount) => mount.target);
  const covered = unsearchableFolders(root, [...binds, ...targets]);
  const inImage = (path: string) => {
    const top = path.split("/")[1];
    return entries.get(top) !== undefined && !REPLACED.has(top) && !covered.some((folder) => within(path, folder));
  };
  const mountPoint = (path: string, kind: "dir" | "file") => {
    if (inImage(path)) ensureMountPoint(root, path, kind);
  };
  const etc = ["/etc/passwd", "/etc/group", "/etc/hosts", ...(spec.egress ? ["/etc/resolv.conf"] : [])];
  for (const path of etc) mountPoint(path, "file");
  mountPoint(SANDBOX_HOME, "dir");
  for (const path of binds) mountPoint(path, lstatSync(path).isDirectory() ? "dir" : "file");
  for (const path of targets) mountPoint(path, "dir");
  const system = ["--perms", "0755", "--tmpfs", "/"];
  for (const [name, kind] of entries) {
    if (REPLACED.has(name)) continue;
    if (kind === "link") system.push("--symlink", readlinkSync(join(root, name)), `/${name}`);
    else system.push("--ro-bind", join(root, name), `/${name}`);
  }
  for (const folder of covered) system.push("--perms", "0755", "--tmpfs", folder);
  if (!entries.has("etc")) system.push("--perms", "0755", "--dir", "/etc");
  // The host's loader reads /etc/ld.so.preload as the privilege drop starts: the image's must not be read.
  const preload = lstatSync(join(root, "etc", "ld.so.preload"), { throwIfNoEntry: false });
  if (preload && !preload.isFile()) {
    throw new Error("The image's /etc/ld.so.preload is not a plain file (a link?): refused");
  }
  if (preload) system.push("--ro-bind", "/dev/null", "/etc/ld.so.preload");
  system.push("--perms", "0755", "--dir", "/.runplane", "--perms", "0755", "--dir", "/.runplane/host");
  system.push("--ro-bind", "/usr", HOST_USR);
  system.push(...hostLibraryArgs(spec));
  return { system, inImage, readOnlyRoot: true, covered };
}

/** Where `JailSpec.hostLibraries` are shown in an image jail: a folder of the jail's own, never the image's. */
export const HOST_LIBRARIES = "/.runplane/driver/lib";

/** Where `JailSpec.hostPrograms` are shown in an image jail, at the end of `PATH`. */
export const HOST_PROGRAMS = "/.runplane/driver/bin";

/** `--ro-bind` of each host file into `folder` under its name; a link, a relative path or a name twice refused. */
function hostFileBinds(files: Array<string | HostFile>, folder: string): string[] {
  const args = ["--perms", "0755", "--dir", folder];
  const names = new Set<string>();
  for (const entry of files) {
    const { file, name } = typeof entry === "string" ? { file: entry, name: basename(entry) } : entry;
    const stat = isAbsolute(file) ? lstatSync(file, { throwIfNoEntry: false }) : undefined;
    if (!stat?.isFile()) throw new Error(`A host library or program must be an absolute path to a plain file: ${file}`);
    if (!/^[^/\0]+$/.test(name) || name === "." || name === "..") {
      throw new Error(`A host library or program's name must be a plain file name: ${JSON.stringify(name)}`);
    }
    if (names.has(name)) throw new Error(`Two host libraries or programs are named ${name}`);
    names.add(name);
    args.push("--ro-bind", file, `${folder}/${name}`);
  }
  return args;
}

/**
 * bubblewrap's arguments that show `spec.hostLibraries` (host paths) read-only in `HOST_LIBRARIES`, and
 * point the dynamic loader there; and `spec.hostPrograms` in `HOST_PROGRAMS`, last on `PATH`. Why
 * `LD_LIBRARY_PATH` rather than binding them into the image's own library folder: that
 * would need mount points made in the shared image and its `ld.so.cache` rebuilt for new names, and a
 * driver must not vary an image every replica shares. The variable is safe here: it names only a folder of
 * host files the server chose, on the jail's read-only tmpfs; the one process of the jail that starts with
 * privileges, the host's setpriv, is run by the host's loader with `--library-path`, which replaces the
 * variable, so nothing in it loads there; the tenant's own processes may load them, as they should. The
 * programs' folder goes last on `PATH`, so it never shadows a command of the image's.
 */
function hostLibraryArgs(spec: JailSpec): string[] {
  const libraries = spec.hostLibraries ?? [];
  const programs = spec.hostPrograms ?? [];
  if (libraries.length === 0 && programs.length === 0) return [];
  const args = ["--perms", "0755", "--dir", "/.runplane/driver"];
  if (libraries.length) {
    args.push(...hostFileBinds(libraries, HOST_LIBRARIES), "--setenv", "LD_LIBRARY_PATH", HOST_LIBRARIES);
  }
  if (programs.length) {
    const path = spec.env.PATH ?? baseEnvironment({ home: SANDBOX_HOME }).PATH;
    args.push(...hostFileBinds(programs, HOST_PROGRAMS), "--setenv", "PATH", `${path}:${HOST_PROGRAMS}`);
  }
  return args;
}
