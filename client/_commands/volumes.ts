import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { lstat, mkdir, readdir, rename, rm } from "node:fs/promises";
import { dirname, join, relative, sep } from "node:path";
import { pipeline } from "node:stream/promises";
import { parseArgs } from "node:util";
import { VolumesClient, type VolumeFileInfo } from "../_volumes.ts";
import { type CommandIo, UsageError } from "../cli_command.ts";
import { isRunplaneError } from "../runplane_error.ts";
import { sleep } from "../sleep.ts";
import { writeTable } from "../table_format.ts";
import { confirm, YES_OPTION } from "./confirm.ts";
import { CONNECTION_HELP, CONNECTION_OPTIONS, projectFor, serverUrls } from "./connection.ts";
import { clearProgress, showProgress, writeJson } from "./output.ts";

/** Help of `runplane volumes`. */
export const VOLUMES_HELP = `Usage:
  runplane volumes create [<project>:]<name> --size-gb N   make a volume of N GiB (its hard limit)
  runplane volumes list [<project>]                        volumes with their size and use
  runplane volumes delete [<project>:]<name> [--yes]       delete a volume and every file in it
  runplane volumes ls [<project>:]<name>[/<prefix>]        files whose path starts with <prefix>
  runplane volumes cp [-r] <local> <project>:<name>/<path> upload a file (-r: a folder, recursively)
  runplane volumes cp [-r] <project>:<name>/<path> <local> download a file (-r: every file under <path>/)

The project defaults to the token's. A volume holds files for a project's replicas (runplane.toml's
[volumes] mounts it); its size is a hard limit (an upload past it is refused, 413). Names: lowercase
letters, digits, - and _, starting with a letter. Sizes from 0.0625 (64 MiB) to 1024 GiB.
cp streams each file (a progress bar on a terminal, a line per file otherwise), skips a file already there
with the same size and SHA-256 (so an interrupted copy resumes where it stopped), and tries a file again
(3 tries in all) after a network error or a 5xx answer. Links in a local folder are not followed.
create, delete and uploads need the deploy scope; list, ls and downloads the rest scope.

${CONNECTION_HELP}`;

/** A volume (or a path in it) named on the command line: `[<project>:]<name>[/<path>]`. */
interface RemoteRef {
  project: string;
  volume: string;
  path: string;
}

function parseRemote(
  text: string,
  options: { flags: Record<string, unknown>; env: CommandIo["env"]; command: string },
): RemoteRef {
  const colon = text.indexOf(":");
  const explicit = colon >= 0 ? text.slice(0, colon) : undefined;
  const rest = colon >= 0 ? text.slice(colon + 1) : text;
  const slash = rest.indexOf("/");
  const volume = slash >= 0 ? rest.slice(0, slash) : rest;
  if (!/^[a-z][a-z0-9_-]{0,62}$/.test(volume)) {
    throw new UsageError(`${options.command}: ${JSON.stringify(text)} names no volume ([<project>:]<name>[/<path>])`);
  }
  const project = projectFor(explicit, { flags: options.flags, env: options.env, command: options.command });
  return { project, volume, path: slash >= 0 ? rest.slice(slash + 1) : "" };
}

/** Whether a command-line argument names a volume rather than a local path: `<project>:<name>…`. */
function isRemote(text: string): boolean {
  return /^[a-z0-9][a-z0-9-]{0,62}:[a-z]/.test(text);
}

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** A progress bar on a terminal: `path [#####     ] 12.0/200.0 MiB`. */
function progressLine(path: string, done: number, total: number): string {
  const width = 24;
  const filled = total > 0 ? Math.round((done / total) * width) : width;
  return `${path} [${"#".repeat(filled)}${" ".repeat(width - filled)}] ${mib(done)}/${mib(total)}`;
}

/** Counts bytes as they pass, showing them on a terminal. */
async function* counted(
  io: CommandIo,
  source: AsyncIterable<Uint8Array>,
  label: { path: string; total: number },
): AsyncGenerator<Uint8Array> {
  let done = 0;
  let shown = 0;
  for await (const chunk of source) {
    done += chunk.length;
    if (done - shown >= 256 * 1024 || done === label.total) {
      shown = done;
      showProgress(io, progressLine(label.path, done, label.total));
    }
    yield chunk;
  }
}

async function fileSha256(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** Whether `error` is worth another try of a whole file: the network, or the server's 5xx. */
function retryable(error: unknown): boolean {
  if (isRunplaneError(error)) return error.status >= 500;
  return error instanceof TypeError || (error as { code?: string }).code !== undefined;
}

/** Runs `step` up to 3 times while it fails for a retryable reason, waiting 0.5 s then 1 s between. */
async function withRetries<T>(io: CommandIo, what: string, step: () => Promise<T>): Promise<T> {
  for (let attempt = 1;; attempt++) {
    try {
      return await step();
    } catch (error) {
      if (attempt >= 3 || !retryable(error)) throw error;
      clearProgress(io);
      io.stderr.write(`${what}: ${(error as Error).message}; trying again (${attempt + 1} of 3)\n`);
      await sleep(500 * attempt, io.signal);
    }
  }
}

/** Every regular file under `root` (links not followed), as paths relative to it with `/`. */
async function localFiles(root: string): Promise<string[]> {
  const found: string[] = [];
  async function walk(dir: string): Promise<void> {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const full = join(dir, entry.name);
      if (entry.isDirectory()) await walk(full);
      else if (entry.isFile()) found.push(relative(root, full).split(sep).join("/"));
    }
  }
  await walk(root);
  return found.sort();
}

interface CopyContext {
  io: CommandIo;
  client: VolumesClient;
  json: boolean;
}

/** Uploads one local file unless the volume has it with the same size and SHA-256. */
async function uploadOne(context: CopyContext, local: string, remote: RemoteRef): Promise<Record<string, unknown>> {
  const { io, client } = context;
  const size = (await lstat(local)).size;
  const sha256 = await fileSha256(local);
  const there = await client.stat(remote.project, remote.volume, remote.path);
  const label = `${remote.project}:${remote.volume}/${remote.path}`;
  if (there && there.size === size && there.sha256 === sha256) {
    if (!context.json) io.stdout.write(`skipped ${label} (already there, sha256 ${sha256.slice(0, 12)})\n`);
    return { path: remote.path, size, sha256, skipped: true };
  }
  const written = await withRetries(io, label, () =>
    client.upload(remote.project, remote.volume, {
      path: remote.path,
      size,
      body: counted(io, createReadStream(local), { path: label, total: size }),
      signal: io.signal,
    }));
  clearProgress(io);
  if (written.sha256 !== sha256) {
    throw new Error(`${label}: the server's sha256 ${written.sha256} is not the file's ${sha256}`);
  }
  if (!context.json) io.stdout.write(`uploaded ${local} -> ${label} (${size} bytes, sha256 ${sha256.slice(0, 12)})\n`);
  return { ...written, skipped: false };
}

/** Downloads one file (to a `.part` file, renamed once complete) unless `local` has it already. */
async function downloadOne(
  context: CopyContext,
  remote: RemoteRef & { info?: VolumeFileInfo },
  local: string,
): Promise<Record<string, unknown>> {
  const { io, client } = context;
  const label = `${remote.project}:${remote.volume}/${remote.path}`;
  const existing = await lstat(local).catch(() => undefined);
  if (existing?.isFile() && remote.info?.sha256 && existing.size === remote.info.size) {
    if ((await fileSha256(local)) === remote.info.sha256) {
      if (!context.json) {
        io.stdout.write(`skipped ${local} (already there, sha256 ${remote.info.sha256.slice(0, 12)})\n`);
      }
      return { path: remote.path, size: existing.size, sha256: remote.info.sha256, skipped: true };
    }
  }
  await mkdir(dirname(local), { recursive: true });
  const partial = `${local}.part`;
  const result = await withRetries(io, label, async () => {
    const file = await client.download(remote.project, remote.volume, remote.path, { signal: io.signal });
    const hash = createHash("sha256");
    async function* hashed(source: AsyncIterable<Uint8Array>) {
      for await (const chunk of source) {
        hash.update(chunk);
        yield chunk;
      }
    }
    try {
      await pipeline(hashed(counted(io, file.body, { path: label, total: file.size })), createWriteStream(partial));
    } catch (error) {
      await rm(partial, { force: true });
      throw error;
    }
    return { sha256: hash.digest("hex"), expected: file.sha256, size: file.size };
  });
  clearProgress(io);
  if (result.expected && result.expected !== result.sha256) {
    await rm(partial, { force: true });
    throw new Error(`${label}: downloaded bytes hash to ${result.sha256}, not the server's ${result.expected}`);
  }
  await rename(partial, local);
  if (!context.json) io.stdout.write(`downloaded ${label} -> ${local} (${result.size} bytes)\n`);
  return { path: remote.path, size: result.size, sha256: result.sha256, skipped: false };
}

/** `volumes cp [-r] <from> <to>`: one of them a volume's path. */
async function copy(
  context: CopyContext,
  args: { from: string; to: string; recursive: boolean; flags: Record<string, unknown> },
) {
  const { io } = context;
  const refOf = (text: string) => parseRemote(text, { flags: args.flags, env: io.env, command: "volumes cp" });
  const copied: Array<Record<string, unknown>> = [];
  if (isRemote(args.to) && !isRemote(args.from)) {
    const remote = refOf(args.to);
    const stats = await lstat(args.from);
    if (stats.isDirectory()) {
      if (!args.recursive) throw new UsageError(`${args.from} is a folder: pass -r to copy it recursively`);
      for (const file of await localFiles(args.from)) {
        const path = remote.path ? `${remote.path.replace(/\/+$/, "")}/${file}` : file;
        copied.push(await uploadOne(context, join(args.from, ...file.split("/")), { ...remote, path }));
      }
    } else {
      const path = remote.path === "" || remote.path.endsWith("/")
        ? `${remote.path}${args.from.split(sep).at(-1)}`
        : remote.path;
      copied.push(await uploadOne(context, args.from, { ...remote, path }));
    }
  } else if (isRemote(args.from) && !isRemote(args.to)) {
    const remote = refOf(args.from);
    if (args.recursive) {
      const prefix = remote.path === "" ? "" : `${remote.path.replace(/\/+$/, "")}/`;
      const files: VolumeFileInfo[] = [];
      for await (const file of context.client.files(remote.project, remote.volume, prefix)) files.push(file);
      for (const info of files) {
        const local = join(args.to, ...info.path.slice(prefix.length).split("/"));
        copied.push(await downloadOne(context, { ...remote, path: info.path, info }, local));
      }
    } else {
      const info = await context.client.stat(remote.project, remote.volume, remote.path);
      const target = (await lstat(args.to).catch(() => undefined))?.isDirectory()
        ? join(args.to, remote.path.split("/").at(-1)!)
        : args.to;
      copied.push(await downloadOne(context, { ...remote, info }, target));
    }
  } else {
    throw new UsageError("volumes cp copies between a local path and a volume's: one side is <project>:<name>/<path>");
  }
  if (context.json) writeJson(io, { files: copied });
  return 0;
}

/** `runplane volumes create|list|delete|ls|cp`. */
export async function volumesCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      ...CONNECTION_OPTIONS,
      ...YES_OPTION,
      "size-gb": { type: "string" },
      recursive: { type: "boolean", short: "r", default: false },
    },
  });
  const subs = ["create", "list", "delete", "ls", "cp"];
  if (!sub || !subs.includes(sub)) {
    throw new UsageError(
      sub ? `Unknown subcommand "${sub}": use ${subs.join(", ")}` : `Name a subcommand: ${subs.join(", ")}`,
    );
  }
  const { baseUrl } = serverUrls(values, io.env);
  const client = new VolumesClient({ baseUrl, token: values.token ?? io.env.RUNPLANE_TOKEN });
  const context = { io, client, json: values.json === true };
  const ref = (text: string | undefined) => {
    if (!text) throw new UsageError(`volumes ${sub} needs [<project>:]<name>`);
    return parseRemote(text, { flags: values, env: io.env, command: `volumes ${sub}` });
  };
  if (sub === "cp") {
    if (positionals.length !== 2) throw new UsageError("volumes cp needs <from> <to>");
    return await copy(context, {
      from: positionals[0],
      to: positionals[1],
      recursive: values.recursive,
      flags: values,
    });
  }
  if (sub === "list") {
    if (positionals.length > 1) throw new UsageError("volumes list takes [<project>] only");
    const project = projectFor(positionals[0], { flags: values, env: io.env, command: "volumes list" });
    const volumes = await client.list(project, { signal: io.signal });
    if (values.json) return (writeJson(io, { volumes }), 0);
    if (volumes.length === 0) {
      io.stderr.write(`Project ${project} has no volumes: runplane volumes create ${project}:NAME --size-gb 1\n`);
    } else {
      writeTable(
        io,
        ["NAME", "SIZE", "USED", "CREATED"],
        volumes.map((v) => [v.name, `${v.size_gb} GiB`, mib(v.used_bytes), v.created_at]),
      );
    }
    return 0;
  }
  if (positionals.length !== 1) throw new UsageError(`volumes ${sub} needs one [<project>:]<name>`);
  const target = ref(positionals[0]);
  if (sub === "create") {
    const size = Number(values["size-gb"]);
    if (values["size-gb"] === undefined || !Number.isFinite(size)) {
      throw new UsageError("volumes create needs --size-gb N");
    }
    const { created, volume } = await client.create(target.project, target.volume, size, { signal: io.signal });
    if (values.json) writeJson(io, { ...volume, created });
    else {io.stdout.write(
        `${created ? "Created" : "Already there:"} ${target.project}:${volume.name} (${volume.size_gb} GiB)\n`,
      );}
    return 0;
  }
  if (sub === "delete") {
    await confirm(io, `Delete the volume ${target.volume} of ${target.project} and every file in it?`, {
      yes: values.yes,
      what: `the volume ${target.volume}`,
    });
    await client.delete(target.project, target.volume, { signal: io.signal });
    if (values.json) writeJson(io, { deleted: target.volume, project_id: target.project });
    else io.stdout.write(`Deleted ${target.project}:${target.volume}\n`);
    return 0;
  }
  const files: VolumeFileInfo[] = [];
  for await (const file of client.files(target.project, target.volume, target.path, { signal: io.signal })) {
    files.push(file);
  }
  if (values.json) return (writeJson(io, { files }), 0);
  writeTable(
    io,
    ["PATH", "SIZE", "MODIFIED", "SHA256"],
    files.map((f) => [f.path, f.size, f.modified, f.sha256?.slice(0, 12) ?? "-"]),
  );
  return 0;
}
