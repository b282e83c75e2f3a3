/**
 * Runs `server/main.ts` as its own process, as `npm start` does, for tests that signal or kill it.
 */
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServiceAccount, loadOrCreateSigningKey } from "../../server/auth/mod.ts";
import { openStore } from "../../server/store/mod.ts";
import { TEST_PROJECT } from "./server.ts";

const MAIN = join(import.meta.dirname, "..", "..", "server", "main.ts");

/** A server process and what a test needs to call it. */
export interface ServerProcess {
  child: ChildProcessWithoutNullStreams;
  url: string;
  token: string;
  dataDir: string;
  appsDir: string;
  /** Everything the process wrote so far. */
  output(): string;
  /** Resolves with the exit code (or signal) once the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Makes a data dir with an apps folder and a `p-test` token, to start servers on. */
export async function prepareDataDir(dataDir?: string): Promise<{ dataDir: string; appsDir: string; token: string }> {
  const dir = dataDir ?? (await mkdtemp(join(tmpdir(), "runplane-proc-")));
  const appsDir = join(dir, "apps");
  await mkdir(join(appsDir, TEST_PROJECT), { recursive: true });
  const store = await openStore(dir);
  try {
    const key = await loadOrCreateSigningKey(dir);
    const { token } = await createServiceAccount({ db: store.db, key }, {
      projectId: TEST_PROJECT,
      name: "process-test",
      scopes: ["rest", "run"],
      expiresAt: Date.now() + 86_400_000,
    });
    return { dataDir: dir, appsDir, token };
  } finally {
    await store.close();
  }
}

/**
 * Starts the server process on a free port with `env` over the defaults and resolves once it listens.
 * Rejects with its output when it exits first.
 */
export async function startServerProcess(
  prepared: { dataDir: string; appsDir: string; token: string },
  env: Record<string, string> = {},
): Promise<ServerProcess> {
  const child = spawn(process.execPath, ["--import", "tsx", MAIN], {
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      RUNPLANE_DATA_DIR: prepared.dataDir,
      RUNPLANE_APPS_DIR: prepared.appsDir,
      RUNPLANE_LOG_LEVEL: "info",
      ...env,
    },
  });
  let output = "";
  child.stdout.on("data", (chunk) => (output += chunk));
  child.stderr.on("data", (chunk) => (output += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal }))
  );
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`The server did not start within 30 s:\n${output}`)), 30_000);
    const onData = () => {
      const match = /"url":"(http:\/\/[^"]+)"/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    };
    child.stdout.on("data", onData);
    void exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`The server exited with ${code} before it listened:\n${output}`));
    });
  });
  return { child, url, token: prepared.token, dataDir: prepared.dataDir, appsDir: prepared.appsDir, output: () => output, exited };
}
