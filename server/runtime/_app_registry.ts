/**
 * Which apps exist: `<appsDir>/<project_id>/<app_name>/runplane.toml`, read at start and re-read when an
 * app folder's files change (polled, so it works on every file system). A changed app gets a new
 * version; the caller drains the old one.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { type AppConfig, AppConfigError, type AppConfigOptions, parseAppConfig } from "./_app_config.ts";

/** Where an app comes from: a folder of the apps dir, or a deployment materialised by this process. */
export type AppSource = "directory" | "deployment";

interface VersionBase {
  projectId: string;
  name: string;
  dir: string;
  fingerprint: string;
  source: AppSource;
  /** The virtualenv the deployment's build made, when it made one (its replicas may read it). */
  venv?: string;
  /** The deployment this version is (undefined for an app of the apps folder). */
  deploymentId?: string;
  /** Makes `dir` (and the virtualenv) ready on this host before a replica starts; see `DeployedApp`. */
  prepare?(): Promise<void>;
  /** The image its replicas run in (`DeployedApp.image`). */
  image?: AppImage;
}

/** The image of a deployed app's `[build] base_image`. */
export interface AppImage {
  /** Its unpacked root file system on this host: its replicas' `/`, read-only. */
  root: string;
  /** Its `ENV`: its replicas' environment under the app's `[env]` and secrets. */
  env: Record<string, string>;
  /** What a Dockerfile's image says to run (`runtime.custom.dockerfile`); `[runtime.custom]` overrides it. */
  process?: ImageProcess;
}

/** The process an image built from a Dockerfile runs: its ENTRYPOINT + CMD, first EXPOSE and WORKDIR. */
export interface ImageProcess {
  /** The argv (a shell form is `["/bin/sh", "-c", text]`); empty when the image names none. */
  command: string[];
  /** The first `EXPOSE`d TCP port, when one is. */
  port?: number;
  /** `WORKDIR` (absolute): the process's working directory. */
  workingDir: string;
}

/** One loaded (or failed) version of an app. */
export type AppVersion =
  | VersionBase & { config: AppConfig; error?: undefined }
  | VersionBase & { config?: undefined; error: string };

/** A deployment's files, ready to serve: built into `dir`, with the interpreter of its virtualenv. */
export interface DeployedApp {
  projectId: string;
  name: string;
  dir: string;
  /** Changes with each deployment (its id): a new version drains the old one. */
  version: string;
  /** The virtualenv's interpreter, when the build made one; it replaces `[deployment] python`. */
  python?: string;
  /**
   * Its `runplane.toml` as recorded before any of its project's commands ran: read in place of `dir`'s, which
   * those commands could have replaced (by a link to a host file, say).
   */
  configToml: string;
  /**
   * Set for a deployment not built on this host yet (a host of a cluster builds one only to run its
   * replicas): what builds it into `dir` and `python`. Each replica's start awaits `prepare` first; it
   * rejects when the deployment cannot be built here.
   */
  deferred?: { prepare(): Promise<void> };
  /** The image its replicas run in; undefined: the host's system. */
  image?: AppImage;
}

/** A deployed app that no deployment serves: its newest build failed, and none of it is ready. */
export interface UnservedApp {
  projectId: string;
  name: string;
  /** The failed deployment its calls are told of. */
  deploymentId: string;
  /** Why its build failed. */
  error: string;
}

/**
 * The version of an app that no deployment serves: it exists (its calls get 503 `app-unavailable` naming
 * the failed deployment, not 404), and it runs nothing.
 */
export function unservedVersion(app: UnservedApp): AppVersion {
  return {
    projectId: app.projectId,
    name: app.name,
    dir: "",
    fingerprint: `failed:${app.deploymentId}`,
    source: "deployment",
    deploymentId: app.deploymentId,
    error:
      `no deployment of it is ready: deployment ${app.deploymentId} failed: ${app.error}; deploy a version that builds and loads`,
  };
}

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
  // The apps folder is the operator's own: its apps may name any url and any pip entry.
  return readVersion({ projectId, name, dir, fingerprint: print, source: "directory" }, {
    allowExternalRuntimes: true,
    pipAllowUnpinned: true,
  });
}

/** Reads an app version's `runplane.toml`; a file that does not load gives a version with its error. */
async function readVersion(
  base: VersionBase,
  options: AppConfigOptions & { python?: string; configToml?: string },
): Promise<AppVersion> {
  const { python, configToml } = options;
  try {
    const config = parseAppConfig(
      configToml ?? await readFile(join(base.dir, "runplane.toml"), "utf8"),
      base.dir,
      options,
    );
    // A deployment's files are its build's to check (a deferred one's are not here yet).
    if (
      configToml === undefined && config.runtime === "python"
      && !(await stat(join(base.dir, "main.py")).catch(() => undefined))
    ) {
      return { ...base, error: "main.py is missing; the python runtime calls functions of main.py" };
    }
    return { ...base, config: python ? { ...config, python } : config };
  } catch (error) {
    if (error instanceof AppConfigError) return { ...base, error: `runplane.toml: ${error.message}` };
    return { ...base, error: `runplane.toml cannot be read: ${(error as Error).message}` };
  }
}

/** Options of `loadDeployedApp`. */
export interface LoadDeployedOptions {
  /** The version read before: returned as it is while the deployment is the same. */
  known?: AppVersion;
  /** RUNPLANE_ALLOW_EXTERNAL_RUNTIMES: without it a deployed `runtime.custom.url` does not load. */
  allowExternalRuntimes?: boolean;
}

/** Reads a deployed app (already built: its pip entries were checked when it was deployed and built). */
export async function loadDeployedApp(app: DeployedApp, options: LoadDeployedOptions = {}): Promise<AppVersion> {
  const fingerprint = `deployment:${app.version}`;
  if (options.known?.fingerprint === fingerprint) return options.known;
  // A url allowed when it was deployed stops loading once the operator takes the setting back.
  return readVersion(
    {
      projectId: app.projectId,
      name: app.name,
      dir: app.dir,
      fingerprint,
      source: "deployment",
      venv: app.python ? dirname(dirname(app.python)) : undefined,
      deploymentId: app.version,
      prepare: app.deferred?.prepare,
      ...(app.image ? { image: app.image } : {}),
    },
    {
      python: app.python,
      configToml: app.configToml,
      allowExternalRuntimes: options.allowExternalRuntimes,
      pipAllowUnpinned: true,
    },
  );
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
