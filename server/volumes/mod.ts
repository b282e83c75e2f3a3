/**
 * Project volumes (issue 48): folders of files with a hard size limit, kept under `RUNPLANE_VOLUMES_DIR`,
 * recorded in the store (`volumes`), filled and read through the files API and mounted into the project's
 * replicas. How the limit is held on disk is `_volume_disk.ts`'s comment (`loop`: an ext4 image per
 * volume; `directory`: the file system under the folder); how files are reached without following a link
 * is `_volume_files.ts`'s. Free of HTTP, so handlers, the runtime and tests share it.
 */
import { existsSync } from "node:fs";
import type { Kysely } from "kysely";
import { ProblemError } from "../problems/mod.ts";
import type { Database } from "../store/mod.ts";
import {
  countVolumes,
  deleteVolumeRow,
  insertVolume,
  lockProject,
  selectVolume,
  selectVolumes,
  type VolumeRow,
} from "./_records.ts";
import {
  checkNotUpload,
  checkVolumeName,
  decodeVolumePath,
  sizeBytesOf,
  VOLUME_LIMITS,
  volumePathNames,
} from "./_volume_checks.ts";
import {
  createVolumeDisk,
  mountVolumeDisk,
  removeVolumeDisk,
  type VolumeOwner,
  type VolumePaths,
  volumePaths,
  type VolumesMode,
} from "./_volume_disk.ts";
import {
  deleteVolumeFile,
  type ListedFile,
  listVolumeFiles,
  type OpenedFile,
  openVolumeFile,
  sweepUploads,
  volumeUsage,
  writeVolumeFile,
} from "./_volume_files.ts";

export { VOLUME_LIMITS } from "./_volume_checks.ts";
export {
  isMountPoint,
  unmountUnder,
  type VolumeOwner,
  type VolumePaths,
  volumePaths,
  type VolumesMode,
} from "./_volume_disk.ts";
export type { ListedFile, OpenedFile } from "./_volume_files.ts";

/** A volume as answered: its size and use. */
export interface VolumeInfo {
  name: string;
  sizeBytes: number;
  usedBytes: number;
  /** ISO 8601. */
  createdAt: string;
}

/** A file as uploaded. */
export interface UploadedFile {
  path: string;
  size: number;
  sha256: string;
  created: boolean;
}

/** The project volumes service. */
export interface Volumes {
  /** How sizes are held on this host. */
  readonly mode: VolumesMode;
  /** Where volumes live on this host. */
  readonly dir: string;
  /**
   * Makes a volume of `sizeGb` GiB (its disk too): `created` false when it exists with that size. Throws a
   * `ProblemError`: 400 for a name or size refused, 409 for another size or one volume past the limit.
   */
  put(projectId: string, name: string, sizeGb: number): Promise<{ created: boolean; volume: VolumeInfo }>;
  /** A volume with its use, or undefined. */
  get(projectId: string, name: string): Promise<VolumeInfo | undefined>;
  /** The project's volumes with their use, by name. */
  list(projectId: string): Promise<VolumeInfo[]>;
  /** Removes a volume and its files: false when there is none; 409 while `inUse` says a deployment mounts it. */
  delete(projectId: string, name: string): Promise<boolean>;
  /**
   * The folder of the volume's files on this host, mounted (`loop`) or made first when needed: what a
   * replica is shown. 404 when the project has no such volume.
   */
  mountedFiles(projectId: string, name: string): Promise<string>;
  /** Writes a file from `source` (see `_volume_files.ts`): 413 past the volume's size, 404 for no volume. */
  writeFile(
    projectId: string,
    name: string,
    file: { path: string; source: AsyncIterable<Uint8Array>; declaredLength?: number },
  ): Promise<UploadedFile>;
  /** Opens a file to stream (the caller closes `handle`). */
  openFile(projectId: string, name: string, path: string): Promise<OpenedFile>;
  /** A page of the volume's files; `cursor` is the previous page's `nextCursor`. */
  listFiles(
    projectId: string,
    name: string,
    query: { prefix?: string; cursor?: string; limit?: number },
  ): Promise<{ files: ListedFile[]; nextCursor: string | null }>;
  /** Removes a file: false when there is none. */
  deleteFile(projectId: string, name: string, path: string): Promise<boolean>;
}

/** Options of `createVolumes`. */
export interface VolumesOptions {
  db: Kysely<Database>;
  /** The store's clock (Unix ms). */
  now(): number;
  /** The volumes folder of this host. */
  dir: string;
  mode: VolumesMode;
  /** Who owns a project's files (its replicas' uid on a root server); default: this process. */
  ownerOf?(projectId: string): VolumeOwner;
  /**
   * The app whose deployment in service mounts the volume, if any: `delete` answers 409 naming it. Set by the
   * runtime's wiring (issue 48 part 2); without it, a volume is never in use.
   */
  inUse?(projectId: string, name: string): string | undefined | Promise<string | undefined>;
}

const GIB = 1024 ** 3;
/** How long an upload's temporary must have been untouched before a shared folder's sweep removes it. */
const STALE_UPLOAD_MS = 60 * 60 * 1000;

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

function noVolume(projectId: string, name: string): ProblemError {
  return new ProblemError("not-found", `Project ${projectId} has no volume ${name}`);
}

/** What a listing's cursor holds: the last path of the page before. */
function decodeCursor(cursor: string | undefined): string | undefined {
  if (cursor === undefined || cursor === "") return undefined;
  const after = Buffer.from(cursor, "base64url").toString("utf8");
  if (Buffer.from(after, "utf8").toString("base64url") !== cursor) {
    throw new ProblemError("validation", "The cursor is not one a listing gave", {
      errors: [{ path: "query.cursor", message: "pass next_cursor of the previous page" }],
    });
  }
  return after;
}

/** Runs steps of one key one after another (each after the one before has settled). */
function oneAtATime(): <T>(key: string, step: () => Promise<T>) => Promise<T> {
  const pending = new Map<string, Promise<unknown>>();
  return function serially<T>(key: string, step: () => Promise<T>): Promise<T> {
    const next = (pending.get(key) ?? Promise.resolve()).catch(() => {}).then(step);
    pending.set(key, next);
    void next.catch(() => {}).finally(() => {
      if (pending.get(key) === next) pending.delete(key);
    });
    return next;
  };
}

/**
 * Records a new volume unless one by its name exists with its size (false); 409 for another size, or one
 * volume past the project's limit (counted behind the project's row: concurrent creations take turns).
 */
async function insertChecked(
  options: VolumesOptions,
  volume: { projectId: string; name: string; sizeBytes: number },
): Promise<boolean> {
  const { projectId, name, sizeBytes } = volume;
  return await options.db.transaction().execute(async (tx) => {
    const now = options.now();
    await lockProject(tx, projectId, now);
    const existing = await selectVolume(tx, { projectId, name });
    if (existing) {
      if (existing.size_bytes === sizeBytes) return false;
      throw new ProblemError(
        "conflict",
        `Volume ${name} of project ${projectId} holds ${
          existing.size_bytes / GIB
        } GiB; volumes are not resized: make a new one and copy its files`,
      );
    }
    const count = await countVolumes(tx, projectId);
    if (count >= VOLUME_LIMITS.volumes) {
      throw new ProblemError(
        "conflict",
        `Project ${projectId} has ${count} volumes; the limit is ${VOLUME_LIMITS.volumes} per project: delete one first`,
      );
    }
    await insertVolume(tx, { projectId, name, sizeBytes, now });
    return true;
  });
}

/** Writes an uploaded file into volume `paths` (see `writeFile`). */
async function upload(
  volume: { paths: VolumePaths; sizeBytes: number; mode: VolumesMode; owner: VolumeOwner },
  file: { path: string; source: AsyncIterable<Uint8Array>; declaredLength?: number },
): Promise<UploadedFile> {
  const names = volumePathNames(decodeVolumePath(file.path));
  const path = names.join("/");
  checkNotUpload(file.path, names);
  const { freeBytes } = await volumeUsage(volume.paths, { mode: volume.mode, sizeBytes: volume.sizeBytes });
  if (file.declaredLength !== undefined && file.declaredLength > freeBytes) {
    throw new ProblemError(
      "content-too-large",
      `The file is ${file.declaredLength} bytes and the volume has ${freeBytes} bytes free; delete files or make a larger volume`,
    );
  }
  const written = await writeVolumeFile(volume.paths, { path, names, source: file.source }, {
    // In `loop` mode the file system is the authority (ENOSPC); statfs answered the declared length above.
    limitBytes: volume.mode === "loop" ? Number.POSITIVE_INFINITY : freeBytes,
    owner: volume.owner,
  });
  return { path, ...written };
}

/**
 * Throws a 503 when volume `paths` is not on this host: its disk is mounted or checked, never made anew
 * outside `put`, since a host that does not see a volume (a shared folder not mounted on it, an image
 * gone) must not serve an empty new one in its place.
 */
function checkOnHost(paths: VolumePaths, volume: { mode: VolumesMode; projectId: string; name: string }): void {
  if (existsSync(paths.root) && (volume.mode !== "loop" || existsSync(paths.image))) return;
  throw new ProblemError(
    "service-unavailable",
    `Volume ${volume.name} of project ${volume.projectId} is not in this host's volumes folder (RUNPLANE_VOLUMES_DIR): its shared file system may not be mounted here`,
  );
}

/**
 * A dead server's unfinished uploads removed from a volume being readied: all of them whenever this
 * process has just mounted it (nothing else can be writing there), else, the first time this process
 * readies it, those untouched for an hour (a shared folder, where another host may be uploading now).
 */
function uploadSweeper(): (key: string, volume: { paths: VolumePaths; mounted: boolean }) => Promise<void> {
  const swept = new Set<string>();
  return async function sweptOnce(key, volume) {
    if (swept.has(key) && !volume.mounted) return;
    const before = volume.mounted ? Number.POSITIVE_INFINITY : Date.now() - STALE_UPLOAD_MS;
    await sweepUploads(volume.paths, { before });
    swept.add(key);
  };
}

/** Creates the volumes service over the store and this host's volumes folder. */
export function createVolumes(options: VolumesOptions): Volumes {
  const { db, dir, mode } = options;
  const ownerOf = options.ownerOf ?? (() => ({ uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 }));
  // One disk operation per volume at a time in this process (two first requests must not both mkfs it).
  const serially = oneAtATime();
  const sweptOnce = uploadSweeper();
  const pathsOf = (projectId: string, name: string) => volumePaths(dir, { projectId, name });

  /** The volume's record, its disk ready on this host (made again if it is missing). */
  async function ready(projectId: string, name: string): Promise<{ row: VolumeRow; paths: VolumePaths }> {
    checkVolumeName(name);
    const row = await selectVolume(db, { projectId, name });
    if (!row) throw noVolume(projectId, name);
    const paths = pathsOf(projectId, name);
    checkOnHost(paths, { mode, projectId, name });
    await serially(`${projectId}/${name}`, async () => {
      const mounted = await mountVolumeDisk(paths, { mode, owner: ownerOf(projectId) });
      await sweptOnce(`${projectId}/${name}`, { paths, mounted });
    });
    return { row, paths };
  }

  async function info(projectId: string, row: VolumeRow): Promise<VolumeInfo> {
    const { paths } = await ready(projectId, row.name);
    const usage = await volumeUsage(paths, { mode, sizeBytes: row.size_bytes });
    return { name: row.name, sizeBytes: row.size_bytes, usedBytes: usage.usedBytes, createdAt: iso(row.created_at) };
  }

  return {
    mode,
    dir,

    async put(projectId, name, sizeGb) {
      checkVolumeName(name);
      const sizeBytes = sizeBytesOf(sizeGb);
      const created = await insertChecked(options, { projectId, name, sizeBytes });
      try {
        // Made here (again, when a PUT of the same size finds it missing: asked for explicitly).
        const owner = ownerOf(projectId);
        await serially(
          `${projectId}/${name}`,
          () => createVolumeDisk(pathsOf(projectId, name), { mode, sizeBytes, owner }),
        );
        const row = (await selectVolume(db, { projectId, name }))!;
        return { created, volume: await info(projectId, row) };
      } catch (error) {
        // A volume whose disk could not be made is not kept (its record would promise space there is not).
        if (created) {
          await serially(`${projectId}/${name}`, () => removeVolumeDisk(pathsOf(projectId, name), { mode }))
            .catch(() => {});
          await deleteVolumeRow(db, { projectId, name }).catch(() => {});
        }
        throw error;
      }
    },

    async get(projectId, name) {
      checkVolumeName(name);
      const row = await selectVolume(db, { projectId, name });
      return row ? await info(projectId, row) : undefined;
    },

    async list(projectId) {
      const rows = await selectVolumes(db, projectId);
      return await Promise.all(rows.map((row) => info(projectId, row)));
    },

    async delete(projectId, name) {
      checkVolumeName(name);
      if (!(await selectVolume(db, { projectId, name }))) return false;
      const app = await options.inUse?.(projectId, name);
      if (app !== undefined) {
        throw new ProblemError(
          "conflict",
          `Volume ${name} is mounted by app ${app}, whose deployment is in service; deploy it without the volume first`,
        );
      }
      await serially(`${projectId}/${name}`, () => removeVolumeDisk(pathsOf(projectId, name), { mode }));
      return await deleteVolumeRow(db, { projectId, name });
    },

    async mountedFiles(projectId, name) {
      return (await ready(projectId, name)).paths.files;
    },

    async writeFile(projectId, name, file) {
      const { row, paths } = await ready(projectId, name);
      return await upload({ paths, sizeBytes: row.size_bytes, mode, owner: ownerOf(projectId) }, file);
    },

    async openFile(projectId, name, rawPath) {
      const names = volumePathNames(decodeVolumePath(rawPath));
      const { paths } = await ready(projectId, name);
      return await openVolumeFile(paths, { path: names.join("/"), names });
    },

    async listFiles(projectId, name, query) {
      const after = decodeCursor(query.cursor);
      const prefix = query.prefix ?? "";
      if (prefix.includes("\0")) volumePathNames(prefix);
      const limit = query.limit ?? 1000;
      const { paths } = await ready(projectId, name);
      const page = await listVolumeFiles(paths, { prefix, after, limit });
      const last = page.files.at(-1);
      return {
        files: page.files,
        nextCursor: page.more && last ? Buffer.from(last.path, "utf8").toString("base64url") : null,
      };
    },

    async deleteFile(projectId, name, rawPath) {
      const names = volumePathNames(decodeVolumePath(rawPath));
      checkNotUpload(rawPath, names);
      const { paths } = await ready(projectId, name);
      return await deleteVolumeFile(paths, { path: names.join("/"), names });
    },
  };
}

/** How volume sizes are held here: the setting, else `loop` as root and `directory` otherwise. */
export function volumesModeOf(setting: VolumesMode | null): { mode: VolumesMode; warning?: string } {
  if (setting) return { mode: setting };
  if (process.getuid?.() === 0) return { mode: "loop" };
  return {
    mode: "directory",
    warning:
      "RUNPLANE_VOLUMES_MODE is unset and the server does not run as root: volumes are plain folders and their sizes are NOT enforced inside replicas (the files API still refuses uploads past them). Run as root for loop-mounted volumes, or set RUNPLANE_VOLUMES_MODE=directory on a file system that holds a quota per project folder",
  };
}
