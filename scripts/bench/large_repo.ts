/**
 * Generates a large git repository quickly with `git fast-import` (one commit, `files` distinct blobs
 * spread over nested folders), for the repository-tree benchmark and tests.
 */
import { spawn } from "node:child_process";
import { mkdir } from "node:fs/promises";
import { once } from "node:events";

/** Options of `createLargeRepo`. */
export interface LargeRepoOptions {
  /** How many files (default 100,000). */
  files?: number;
  /** Files per innermost folder (default 100); folders nest two levels: `src/mNNN/dNN/`. */
  filesPerFolder?: number;
  /** The branch to commit on (default `main`, also HEAD). */
  branch?: string;
}

/** What `createLargeRepo` made. */
export interface LargeRepo {
  path: string;
  files: number;
  /** Every path in the tree, folders included. */
  entries: number;
}

/**
 * Creates a bare repository at `path` holding one commit with `files` files. Resolves when git has
 * written the pack; rejects when git fails.
 */
export async function createLargeRepo(path: string, options: LargeRepoOptions = {}): Promise<LargeRepo> {
  const files = options.files ?? 100_000;
  const perFolder = options.filesPerFolder ?? 100;
  const branch = options.branch ?? "main";
  await mkdir(path, { recursive: true });
  const env = { ...process.env, GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null" };
  await runQuiet(["init", "--quiet", "--bare", `--initial-branch=${branch}`, path], env);
  const child = spawn("git", ["fast-import", "--quiet", "--done"], {
    cwd: path,
    env,
    stdio: ["pipe", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk));
  const exited = once(child, "close");
  async function write(text: string): Promise<void> {
    if (!child.stdin.write(text)) await once(child.stdin, "drain");
  }
  const folders = new Set<string>();
  const lines: string[] = [];
  for (let i = 0; i < files; i++) {
    const folder = `src/m${String(Math.floor(i / (perFolder * 10))).padStart(3, "0")}/d${
      String(Math.floor(i / perFolder) % 10).padStart(2, "0")
    }`;
    folders.add(folder).add(folder.slice(0, folder.lastIndexOf("/")));
    const content = `file ${i}\n`;
    await write(`blob\nmark :${i + 1}\ndata ${Buffer.byteLength(content)}\n${content}\n`);
    lines.push(`M 100644 :${i + 1} ${folder}/f${String(i).padStart(6, "0")}.txt\n`);
  }
  const message = `${files} files\n`;
  await write(
    `commit refs/heads/${branch}\ncommitter Bench <bench@example.com> 1700000000 +0000\ndata ${message.length}\n${message}`,
  );
  for (const line of lines) await write(line);
  await write("\ndone\n");
  child.stdin.end();
  const [code] = await exited;
  if (code !== 0) throw new Error(`git fast-import failed (exit ${code}): ${stderr.trim()}`);
  return { path, files, entries: files + folders.size + 1 };
}

async function runQuiet(args: string[], env: NodeJS.ProcessEnv): Promise<void> {
  const child = spawn("git", args, { env, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk));
  const [code] = await once(child, "close");
  if (code !== 0) throw new Error(`git ${args[0]} failed (exit ${code}): ${stderr.trim()}`);
}
