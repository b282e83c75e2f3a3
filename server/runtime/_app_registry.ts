/**
 * Which apps exist: `<appsDir>/<project_id>/<app_name>/runplane.toml`, read at start and re-read when an
 * app folder's files change (polled, so it works on every file system). A changed app gets a new
 * version; the caller drains the old one.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { type AppConfig, AppConfigError, parseAppConfig } from "./_app_config.ts";

/** One loaded (or failed) version of an app. */
export type AppVersion =
  | { projectId: string; name: string; dir: string; fingerprint: string; config: AppConfig; error?: undefined }
  | { projectId: string; name: string; dir: string; fingerprint: string; config?: undefined; error: string };

const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;

async function entries(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir, { withFileTypes: true })).filter((e) => e.isDirectory() && NAME.test(e.name)).map((e) =>
      e.name
    );
  } catch {
    return [];
  }
}

/** A cheap summary of an app folder's top-level files: changes when one is added, removed or edited. */
async function fingerprint(dir: string): Promise<string | undefined> {
  let names: string[];
  try {
    names = (await readdir(dir)).filter((n) => !n.startsWith(".") && n !== "__pycache__").sort();
  } catch {
    return undefined;
  }
  if (!names.includes("runplane.toml")) return undefined;
  const parts = await Promise.all(names.map(async (n) => {
    const info = await stat(join(dir, n)).catch(() => undefined);
    return info ? `${n}:${info.mtimeMs}:${info.size}` : n;
  }));
  return parts.join("|");
}

/**
 * Reads one app folder; undefined when it holds no `runplane.toml`. `known`, the version read before,
 * is returned as it is when the folder has not changed since (its configuration is not read again).
 */
export async function loadApp(
  appsDir: string,
  projectId: string,
  name: string,
  known?: AppVersion,
): Promise<AppVersion | undefined> {
  const dir = join(appsDir, projectId, name);
  const print = await fingerprint(dir);
  if (print === undefined) return undefined;
  if (known?.dir === dir && known.fingerprint === print) return known;
  const base = { projectId, name, dir, fingerprint: print };
  try {
    const config = parseAppConfig(await readFile(join(dir, "runplane.toml"), "utf8"), dir);
    if (config.runtime === "python" && !(await stat(join(dir, "main.py")).catch(() => undefined))) {
      return { ...base, error: "main.py is missing; the python runtime calls functions of main.py" };
    }
    return { ...base, config };
  } catch (error) {
    if (error instanceof AppConfigError) return { ...base, error: `runplane.toml: ${error.message}` };
    return { ...base, error: `runplane.toml cannot be read: ${(error as Error).message}` };
  }
}

/** Every app folder under `appsDir`, loaded; `known` names the version read before, kept while its folder is unchanged. */
export async function scanApps(
  appsDir: string,
  known?: (projectId: string, name: string) => AppVersion | undefined,
): Promise<AppVersion[]> {
  const found: AppVersion[] = [];
  for (const projectId of await entries(appsDir)) {
    for (const name of await entries(join(appsDir, projectId))) {
      const app = await loadApp(appsDir, projectId, name, known?.(projectId, name));
      if (app) found.push(app);
    }
  }
  return found;
}
