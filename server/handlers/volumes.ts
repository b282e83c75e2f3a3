import type { ServerContext } from "../context.ts";
import { type Handlers, parseByteRange } from "../http/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import type { ListedFile, VolumeInfo } from "../volumes/mod.ts";

type VolumeHandlers = Pick<
  Handlers,
  | "putVolume"
  | "getVolume"
  | "listVolumes"
  | "deleteVolume"
  | "putVolumeFile"
  | "getVolumeFile"
  | "listVolumeFiles"
  | "deleteVolumeFile"
>;

const GIB = 1024 ** 3;

function view(volume: VolumeInfo) {
  return {
    name: volume.name,
    size_gb: volume.sizeBytes / GIB,
    size_bytes: volume.sizeBytes,
    used_bytes: volume.usedBytes,
    created_at: volume.createdAt,
  };
}

function fileView(file: ListedFile) {
  return {
    path: file.path,
    size: file.size,
    modified: file.modified.toISOString(),
    ...(file.sha256 ? { sha256: file.sha256 } : {}),
  };
}

/** Project volumes and their files over REST: `deploy` to make, write and delete, `rest` to read. */
export function volumeHandlers(context: ServerContext): VolumeHandlers {
  const { volumes, logger } = context;
  return {
    async putVolume({ path, body }) {
      const { created, volume } = await volumes.put(path.project_id, path.name, body!.size_gb);
      if (created) {
        logger.info({ project_id: path.project_id, volume: path.name, size_bytes: volume.sizeBytes }, "volume made");
      }
      return { status: created ? 201 : 200, contentType: "application/json", body: view(volume) };
    },
    async getVolume({ path }) {
      const volume = await volumes.get(path.project_id, path.name);
      if (!volume) throw new ProblemError("not-found", `Project ${path.project_id} has no volume ${path.name}`);
      return { status: 200, contentType: "application/json", body: view(volume) };
    },
    async listVolumes({ path }) {
      const list = await volumes.list(path.project_id);
      return { status: 200, contentType: "application/json", body: { volumes: list.map(view) } };
    },
    async deleteVolume({ path }) {
      if (!(await volumes.delete(path.project_id, path.name))) {
        throw new ProblemError("not-found", `Project ${path.project_id} has no volume ${path.name}`);
      }
      logger.info({ project_id: path.project_id, volume: path.name }, "volume deleted");
      return { status: 204 };
    },
    async putVolumeFile({ path, body }) {
      const written = await volumes.writeFile(path.project_id, path.name, {
        path: path.path,
        source: body!,
        declaredLength: body!.declaredLength,
      });
      return {
        status: written.created ? 201 : 200,
        contentType: "application/json",
        body: { path: written.path, size: written.size, sha256: written.sha256 },
      };
    },
    async getVolumeFile({ path, header, passed }) {
      const file = await volumes.openFile(path.project_id, path.name, path.path);
      try {
        if (passed?.method === "HEAD") {
          // No body is sent: the file is not read, and closed now.
          await file.handle.close();
          const headers: Record<string, string> = { "Accept-Ranges": "bytes", "Content-Length": String(file.size) };
          if (file.sha256) headers.ETag = `"${file.sha256}"`;
          return { status: 200, contentType: "application/octet-stream", headers, body: (async function*() {})() };
        }
        const range = parseByteRange(header.Range, file.size);
        const headers: Record<string, string> = { "Accept-Ranges": "bytes" };
        if (file.sha256) headers.ETag = `"${file.sha256}"`;
        if (!range) {
          headers["Content-Length"] = String(file.size);
          const body = file.handle.createReadStream();
          return { status: 200, contentType: "application/octet-stream", headers, body };
        }
        headers["Content-Length"] = String(range.end - range.start + 1);
        headers["Content-Range"] = `bytes ${range.start}-${range.end}/${file.size}`;
        const body = file.handle.createReadStream({ start: range.start, end: range.end });
        return { status: 206, contentType: "application/octet-stream", headers, body };
      } catch (error) {
        await file.handle.close();
        throw error;
      }
    },
    async listVolumeFiles({ path, query }) {
      const page = await volumes.listFiles(path.project_id, path.name, query);
      return {
        status: 200,
        contentType: "application/json",
        body: { files: page.files.map(fileView), next_cursor: page.nextCursor },
      };
    },
    async deleteVolumeFile({ path }) {
      if (!(await volumes.deleteFile(path.project_id, path.name, path.path))) {
        throw new ProblemError("not-found", `Volume ${path.name} has no file ${JSON.stringify(path.path)}`);
      }
      return { status: 204 };
    },
  };
}
