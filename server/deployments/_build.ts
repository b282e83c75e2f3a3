/**
 * Running a deployment's build in its folder, in the platform's order: pre-build commands → apt and conda
 * packages (on the host's system checked, not installed; on a base image apt installs into a system layer,
 * _system_layer.ts) → pip dependencies (a virtualenv per dependency layer: shared by every project with the
 * same inputs, or the project's own; see _dependency_layer.ts) → the code → shell commands. With a base image
 * every step runs with the image's (or its system layer's) root as `/`. Each command runs as _build_step.ts
 * says.
 */
import { spawn } from "node:child_process";
import { constants } from "node:fs";
import { mkdir, open, rm, writeFile } from "node:fs/promises";
import { dirname, isAbsolute, join } from "node:path";
import type { BuildLogLine } from "./_build_log.ts";
import type { BuildPlan } from "./_build_plan.ts";
import { BuildError, runStep, type StepCommand, type StepOptions, withLock } from "./_build_step.ts";
import { type DependencyLayer, layerReady, readyMarker } from "./_dependency_layer.ts";
import type { ImageStore } from "../images/mod.ts";
import type { JailMount } from "../sandbox/mod.ts";
import type { DeploymentImage } from "./_image_step.ts";
import { buildSystemLayer, type SystemLayer } from "./_system_layer.ts";

export type { BuildLogLine } from "./_build_log.ts";
export { BuildError } from "./_build_step.ts";

/** The build's dependency layer. */
export interface BuildResult {
  /** `none`: no pip dependencies; `new`: this build made the virtualenv; `cached`: it existed. */
  venv: "none" | "new" | "cached";
  /** The virtualenv's interpreter, when there is one. */
  python?: string;
  /** The root its replicas run in: the system layer's when the build has one, else the image's. */
  imageRoot?: string;
}

/** Options of `runBuild`. */
export interface RunBuildOptions extends StepOptions {
  /** Where the virtualenv of the build's pip dependencies is, and who builds it (see _dependency_layer.ts). */
  layer?: DependencyLayer;
  /** The interpreter a virtualenv is made with. */
  python: string;
  pipIndexUrl?: string;
  pipFindLinks?: string;
  /** RUNPLANE_PIP_ALLOW_UNPINNED: requirement lines may be pip options (`requirementsText`). */
  pipAllowUnpinned?: boolean;
  /** The image of `[build] base_image`: every step runs with its root as `/`. */
  image?: DeploymentImage;
  /** The layer of its `[dependencies.apt]` on the image (`systemLayer`), when it has some. */
  systemLayer?: SystemLayer;
  /** The image store: a system layer is pulled from, and pushed to, the cluster's registry when it has one. */
  images?: ImageStore;
  /** `[build] volumes = true`: the project's volumes, shown to its own commands (pre-build, shell) alone. */
  volumeMounts?: JailMount[];
}

/**
 * Runs commands with `/bin/sh -c` as the project: the deployment folder writable (it was handed to the
 * project's uid before the build's first command), the virtualenv (if any) read-only.
 */
async function shellCommands(
  step: string,
  commands: string[],
  options: RunBuildOptions & { dir: string; venv?: string },
) {
  const { dir, venv } = options;
  const env: Record<string, string> = venv
    ? { VIRTUAL_ENV: venv, PATH: `${join(venv, "bin")}:/usr/local/bin:/usr/bin:/bin` }
    : {};
  const mounts = options.volumeMounts?.length ? { mounts: options.volumeMounts } : {};
  const jail = { cwd: dir, writable: [dir], readOnly: venv ? [venv] : [], env, ...mounts };
  for (const shown of commands) {
    options.log({ stream: "build", text: `$ ${shown}` });
    await runStep(step, { file: "/bin/sh", args: ["-c", shown], shown, jail }, options);
  }
}

/** Whether a Debian package is installed on this host (`dpkg-query`); `name=version` pins the version. */
function aptInstalled(spec: string): Promise<boolean> {
  const [name, version] = spec.split("=");
  return new Promise((resolve) => {
    const child = spawn("dpkg-query", ["-W", "-f=${Status}\\t${Version}", name], {
      stdio: ["ignore", "pipe", "ignore"],
    });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (text: string) => (out += text));
    child.once("error", () => resolve(false));
    child.once("close", (code) => {
      const [status, installed] = out.split("\t");
      resolve(code === 0 && status === "install ok installed" && (!version || installed === version));
    });
  });
}

async function checkApt(packages: string[], options: RunBuildOptions): Promise<void> {
  if (packages.length === 0) return;
  options.log({
    stream: "build",
    text: `==> apt: checking ${packages.join(", ")} (installed on the host, not by the build)`,
  });
  const missing: string[] = [];
  for (const spec of packages) if (!(await aptInstalled(spec))) missing.push(spec);
  if (missing.length) {
    throw new BuildError(
      "apt",
      `apt failed: ${missing.join(", ")} ${
        missing.length === 1 ? "is" : "are"
      } not installed on this host; Runplane checks [dependencies.apt] and does not install it: ask the operator to install ${
        missing.length === 1 ? "it" : "them"
      }`,
    );
  }
}

async function checkConda(packages: string[], options: RunBuildOptions): Promise<void> {
  if (packages.length === 0) return;
  options.log({
    stream: "build",
    text: `==> conda: checking ${packages.join(", ")} (installed on the host, not by the build)`,
  });
  const listed = await new Promise<string | null>((resolve) => {
    const child = spawn("conda", ["list", "--json"], { stdio: ["ignore", "pipe", "ignore"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (text: string) => (out += text));
    child.once("error", () => resolve(null));
    child.once("close", (code) => resolve(code === 0 ? out : null));
  });
  const names = new Set(listed === null ? [] : (JSON.parse(listed) as { name: string }[]).map((p) => p.name));
  const missing = packages.filter((spec) => !names.has(spec.split("=")[0]));
  if (missing.length) {
    const where = listed === null ? "conda is not installed on this host" : "conda on this host does not have them";
    throw new BuildError(
      "conda",
      `conda failed: ${
        missing.join(", ")
      } missing (${where}); Runplane checks [dependencies.conda] and does not install it`,
    );
  }
}

/**
 * `[dependencies.apt]` and `[dependencies.conda]`: on the host's system, checked there (not installed); on
 * a base image, the image's apt and conda install them into the system layer, whose root the later steps
 * (and the replicas) run on — the options answered say which root that is.
 */
async function systemPackages(plan: BuildPlan, options: RunBuildOptions): Promise<RunBuildOptions> {
  if (!options.image) {
    await checkApt(plan.apt, options);
    await checkConda(plan.conda, options);
    return options;
  }
  if (!options.systemLayer) return options;
  const image = options.image;
  const { root } = await buildSystemLayer(options.systemLayer, { ...options, base: image.root, env: image.env });
  return { ...options, image: { ...image, root } };
}

// A token pip reads as an option (`--index-url`, `-r`, `-e`, `--config-settings` after a name, …).
const OPTION_TOKEN = /(^|\s)-/;
const LINE_BREAK = /[\r\n\0]/;

/**
 * pip's requirements file: one requirement per line. It is the last guard, whatever the config check
 * let through: a requirement that would span lines is refused, and so, unless the operator allows pip
 * options (`allowOptions`), is one holding a token that starts with `-` or ending in `\` (which joins
 * the next line to it). Throws a BuildError of the pip step naming the requirement.
 */
export function requirementsText(requirements: readonly string[], options: { allowOptions?: boolean } = {}): string {
  for (const line of requirements) {
    if (LINE_BREAK.test(line)) {
      throw new BuildError("pip", `pip refused: ${JSON.stringify(line)} spans lines; one entry is one requirement`);
    }
    if (!options.allowOptions && (OPTION_TOKEN.test(line) || line.trimEnd().endsWith("\\"))) {
      throw new BuildError(
        "pip",
        `pip refused: ${
          JSON.stringify(line)
        } is a pip option, not a requirement; [dependencies.pip] takes package names with versions (the operator may allow options with RUNPLANE_PIP_ALLOW_UNPINNED)`,
      );
    }
  }
  return `${requirements.join("\n")}\n`;
}

/**
 * The jail of the virtualenv's steps. pip's own settings come only from the operator: no pip.conf (the
 * environment, built from scratch, has no PIP_* either). A shared layer's steps see nothing of the bundle:
 * it is not mounted and the working directory is `/`, so no file of it can stand in for a module of the
 * standard library (`venv.py`, `site.py`, `sitecustomize.py`, a `.pth`). A project layer's steps read it.
 */
function pipJail(
  layer: DependencyLayer,
  options: Pick<RunBuildOptions, "pipFindLinks"> & { dir: string; requirements: string },
): StepCommand["jail"] {
  const findLinks = options.pipFindLinks && isAbsolute(options.pipFindLinks) ? [options.pipFindLinks] : [];
  const bundle = layer.scope === "project" ? [options.dir] : [];
  return {
    cwd: bundle.length ? options.dir : "/",
    readOnly: [...bundle, options.requirements, ...findLinks],
    writable: [layer.dir],
    env: { VIRTUAL_ENV: layer.dir, PIP_CONFIG_FILE: "/dev/null", PIP_NO_INPUT: "1" },
  };
}

/**
 * pip's arguments for installing `requirements`. With no index setting pip goes to PyPI; there, one quick
 * retry (no backoff) and a 5 s socket timeout instead of pip's five retries with backoff and 15 s: a host
 * that cannot reach PyPI fails the build in seconds (it took ~28 s), and the one retry's warning is what
 * tells `pipInstall` the index was unreachable (with none, pip says only that it found no version).
 */
export function pipInstallArgs(
  requirements: string,
  options: Pick<RunBuildOptions, "pipIndexUrl" | "pipFindLinks">,
): string[] {
  const args = ["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-r", requirements];
  if (options.pipIndexUrl) args.push("--index-url", options.pipIndexUrl);
  else if (options.pipFindLinks) args.push("--no-index");
  else args.push("--retries", "1", "--timeout", "5");
  if (options.pipFindLinks) args.push("--find-links", options.pipFindLinks);
  return args;
}

/** What pip (urllib3) prints when it cannot connect to, resolve or hear back from an index. */
const PIP_UNREACHABLE =
  /NewConnectionError|ConnectTimeoutError|Failed to establish a new connection|Name or service not known|Temporary failure in name resolution|Network is unreachable|Connection refused|Read timed out|ProxyError/;

/** Added to a failed pip step's error when pip could not reach its index. */
const PIP_UNREACHABLE_HINT =
  "pip could not reach the package index: give the server one it can reach with RUNPLANE_PIP_INDEX_URL (an index or a mirror of PyPI) or RUNPLANE_PIP_FIND_LINKS (a folder of wheels)";

/** Runs `pip install`; a failure after pip could not reach its index says which settings to give. */
async function pipInstall(command: Omit<StepCommand, "egress">, options: RunBuildOptions): Promise<void> {
  let unreachable = false;
  const log = (line: BuildLogLine) => {
    if (line.stream !== "build" && PIP_UNREACHABLE.test(line.text)) unreachable = true;
    options.log(line);
  };
  try {
    await runStep("pip", { ...command, egress: true }, { ...options, log });
  } catch (error) {
    if (unreachable && error instanceof BuildError) {
      throw new BuildError("pip", `${error.message}: ${PIP_UNREACHABLE_HINT}`);
    }
    throw error;
  }
}

/**
 * Writes pip's requirements file for `layer` beside it (where it stays, saying what the layer holds), where
 * only the server writes (the layer's own folder is its builder's): made anew, never through a link, and
 * read-only in the jail.
 */
async function writeRequirements(layer: DependencyLayer, text: string): Promise<string> {
  const path = `${layer.dir}.requirements.txt`;
  await rm(path, { force: true });
  await writeFile(path, text, { flag: "wx", mode: 0o644 });
  return path;
}

/** Marks `layer` ready: its marker is created by the server, never through a link the builder left. */
async function markReady(layer: DependencyLayer, digest: string): Promise<void> {
  const file = await open(
    readyMarker(layer.dir),
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o644,
  );
  try {
    await file.writeFile(`${digest}\n`);
  } finally {
    await file.close();
  }
}

async function pipLayer(dir: string, plan: BuildPlan, options: RunBuildOptions): Promise<BuildResult> {
  const { layer } = options;
  if (plan.pipRequirements.length === 0 || !layer) return { venv: "none" };
  const requirementsFile = requirementsText(plan.pipRequirements, { allowOptions: options.pipAllowUnpinned });
  const shown = `${layer.scope === "shared" ? "" : `${layer.scope} `}virtualenv ${plan.digest}`;
  if (await layerReady(layer.dir)) {
    options.log({ stream: "build", text: `==> pip: cached ${shown}` });
    return { venv: "cached", python: layer.python };
  }
  await mkdir(dirname(layer.dir), { recursive: true });
  return await withLock<BuildResult>(`${layer.dir}.lock`, options, async () => {
    if (await layerReady(layer.dir)) {
      options.log({ stream: "build", text: `==> pip: cached ${shown} (built meanwhile)` });
      return { venv: "cached", python: layer.python };
    }
    options.log({ stream: "build", text: `==> pip: new ${shown}: ${plan.pipRequirements.join(" ")}` });
    // A virtualenv is not relocatable: it is made in place, and only the marker written last makes it usable.
    // Its folder is made empty by the server and handed to its builder, whose steps alone write it; replicas
    // and later build commands only ever mount it read-only.
    await rm(layer.dir, { recursive: true, force: true });
    await mkdir(layer.dir, { mode: 0o755 });
    await options.sandbox.handOver(layer.dir, layer.builder);
    const requirements = await writeRequirements(layer, requirementsFile);
    const jail = pipJail(layer, { dir, requirements, pipFindLinks: options.pipFindLinks });
    const builder = { ...options, projectId: layer.builder };
    // `-I`: no PYTHON* variable, no working directory and no user site on sys.path, in both steps.
    await runStep("pip", {
      file: options.python,
      args: ["-I", "-m", "venv", layer.dir],
      shown: `${options.python} -I -m venv`,
      jail,
      egress: true,
    }, builder);
    const args = ["-I", ...pipInstallArgs(requirements, options)];
    await pipInstall(
      { file: layer.python, args, shown: `pip install ${plan.pipRequirements.join(" ")}`, jail },
      builder,
    );
    await markReady(layer, plan.digest);
    return { venv: "new", python: layer.python };
  }).catch(async (error) => {
    // No process of the builder is left (each step's jail dies with it), so nothing races this removal,
    // and rm removes a link it meets, never what the link names.
    if (!(await layerReady(layer.dir))) await rm(layer.dir, { recursive: true, force: true });
    throw error;
  });
}

/** Builds the deployment in `dir` by `plan`; throws a BuildError naming the step that failed. */
export async function runBuild(dir: string, plan: BuildPlan, options: RunBuildOptions): Promise<BuildResult> {
  // The folder is the project's from its first command on: handed over once, while it holds only what the
  // server unpacked. The server never walks it again (a command may have left links in it).
  if (plan.preBuildCommands.length || plan.shellCommands.length) await options.sandbox.handOver(dir, options.projectId);
  if (plan.preBuildCommands.length) {
    options.log({ stream: "build", text: "==> pre-build commands" });
    await shellCommands("pre-build", plan.preBuildCommands, { ...options, dir });
  }
  const built = await systemPackages(plan, options);
  const result = { ...await pipLayer(dir, plan, built), ...(built.image ? { imageRoot: built.image.root } : {}) };
  built.log({ stream: "build", text: "==> code: in place" });
  if (plan.shellCommands.length) {
    built.log({ stream: "build", text: "==> shell commands" });
    const venv = result.python ? join(result.python, "..", "..") : undefined;
    await shellCommands("shell", plan.shellCommands, { ...built, dir, venv });
  }
  return result;
}
