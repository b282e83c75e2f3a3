/**
 * Where a project volume lives on a host, and the mechanism that makes its size a hard limit.
 *
 * Every volume is `<volumes dir>/<project>/<name>/`, its files in `files/` below that: the one folder the
 * files API writes and replicas are shown. How its size is held depends on the mode (`RUNPLANE_VOLUMES_MODE`):
 *
 * - `loop` (the default where the server is root): the volume is an ext4 file system in a sparse file of
 *   its size (`<name>.ext4` beside the folder), loop-mounted on the folder. A write past the size fails with
 *   `ENOSPC` in that file system — inside the replica — and never fills the host's disk. Chosen over project
 *   quotas because quotas need the host's file system mounted with `prjquota` (an operator's choice we cannot
 *   make; this machine's root file system has none), and a loop file system holds its limit on any disk. The
 *   image is made with ext4's multiple-mount protection (`mmp`), so two machines that see one image on shared
 *   storage cannot both mount it; processes of one machine share its one mount.
 * - `directory`: the volume is a plain folder and the file system under the volumes dir holds the limit (an
 *   NFS export with a quota per project folder, say): how a cluster of several machines shares volumes. The
 *   files API still refuses an upload past the size.
 */
import { execFile } from "node:child_process";
import { chownSync, existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** How volume sizes are held on this host (see the module's comment). */
export type VolumesMode = "loop" | "directory";

/** One volume's paths on this host. */
export interface VolumePaths {
  /** The folder the volume is (mounted on, in `loop` mode). */
  root: string;
  /** Its files: what the files API reads and writes and replicas are shown. */
  files: string;
  /** The ext4 image (`loop` mode only). */
  image: string;
}

/** Who owns a volume's files: the project's uid on a root server (so its replicas can write), else us. */
export interface VolumeOwner {
  uid: number;
  gid: number;
}

/** The paths of volume `name` of `projectId` under `dir` (names and ids are checked before they get here). */
export function volumePaths(dir: string, volume: { projectId: string; name: string }): VolumePaths {
  const project = join(dir, volume.projectId);
  return {
    root: join(project, volume.name),
    files: join(project, volume.name, "files"),
    image: join(project, `${volume.name}.ext4`),
  };
}

/** Whether `path` is a mount point in this process's mount namespace. */
export function isMountPoint(path: string): boolean {
  const lines = readFileSync("/proc/self/mountinfo", "utf8").split("\n");
  // Field 5 is the mount point, with spaces and backslashes octal-escaped.
  const escaped = path.replace(/[\\ \t\n]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, "0")}`);
  return lines.some((line) => line.split(" ")[4] === escaped);
}

/**
 * Makes volume `paths` of `sizeBytes` (the image, its file system and mount in `loop` mode; the folders in
 * `directory` mode), its `files/` owned by `owner`. Idempotent: an existing image is mounted, not remade.
 */
export async function createVolumeDisk(
  paths: VolumePaths,
  options: { mode: VolumesMode; sizeBytes: number; owner: VolumeOwner },
): Promise<void> {
  mkdirSync(paths.root, { recursive: true, mode: 0o711 });
  if (options.mode === "loop" && !existsSync(paths.image)) {
    const partial = `${paths.image}.partial`;
    rmSync(partial, { force: true });
    // A sparse file: it takes disk as it fills. `-m 0`: no blocks reserved for root, the size is the tenant's.
    await run("truncate", ["-s", String(options.sizeBytes), partial]);
    await run("mkfs.ext4", ["-q", "-F", "-m", "0", "-O", "mmp", "-E", "lazy_itable_init=1", partial]);
    await run("mv", ["-f", partial, paths.image]);
  }
  await mountVolumeDisk(paths, options);
}

/**
 * Switches the loop device backing `image` to direct I/O: its writes go to the image file without being
 * cached a second time in the host's page cache. Measured: `cp` + `sync` of 500 MiB into a loop-mounted
 * volume took ~2.4× as long as onto the disk without it, about as long with it. Best effort: a kernel or
 * file system that refuses it leaves the device buffered, which is slower, not wrong.
 */
async function directIo(image: string): Promise<void> {
  try {
    const { stdout } = await run("losetup", ["--associated", image, "--output", "NAME", "--noheadings"]);
    for (const device of stdout.split("\n").map((line) => line.trim()).filter(Boolean)) {
      await run("losetup", ["--direct-io=on", device]);
    }
  } catch {
    // Left buffered.
  }
}

/**
 * Mounts volume `paths` (`loop` mode) unless it is mounted already; then makes sure `files/` exists and is
 * `owner`'s. True when this call mounted it: no process of this machine had it (and, by `mmp`, no other
 * machine has it), so nothing can be writing in it yet.
 */
export async function mountVolumeDisk(
  paths: VolumePaths,
  options: { mode: VolumesMode; owner: VolumeOwner },
): Promise<boolean> {
  let mounted = false;
  if (options.mode === "loop" && !isMountPoint(paths.root)) {
    mkdirSync(paths.root, { recursive: true, mode: 0o711 });
    try {
      await run("mount", ["-t", "ext4", "-o", "loop,nosuid,nodev", paths.image, paths.root]);
      await directIo(paths.image);
      mounted = true;
    } catch (error) {
      // Another process of this machine mounted it between our look and our mount: theirs is ours.
      if (!isMountPoint(paths.root)) throw error;
    }
  }
  mkdirSync(paths.files, { recursive: true, mode: 0o755 });
  chownSync(paths.files, options.owner.uid, options.owner.gid);
  return mounted;
}

/** Unmounts (`loop` mode) and removes volume `paths` with all its files. */
export async function removeVolumeDisk(paths: VolumePaths, options: { mode: VolumesMode }): Promise<void> {
  if (options.mode === "loop" && isMountPoint(paths.root)) {
    // Lazy: a process still holding a file keeps the file system until it lets go; nothing new reaches it.
    await run("umount", ["-l", paths.root]);
  }
  rmSync(paths.root, { recursive: true, force: true });
  rmSync(paths.image, { force: true });
}

/** Unmounts every volume mounted under `dir` in this mount namespace (tests' cleanup, an operator's stop). */
export async function unmountUnder(dir: string): Promise<string[]> {
  const prefix = `${dir.replace(/\/+$/, "")}/`;
  const mounted = readFileSync("/proc/self/mountinfo", "utf8").split("\n")
    .map((line) => line.split(" ")[4]?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((point): point is string => point !== undefined && point.startsWith(prefix));
  for (const point of mounted.reverse()) await run("umount", ["-l", point]);
  return mounted;
}
