/**
 * Running a deployment's build in its folder, in the platform's order: pre-build commands → apt and conda
 * packages (checked on the host, not installed) → pip dependencies (a virtualenv per base-image digest,
 * shared by every deployment and app with that digest) → the code → shell commands. Every command runs in
 * its own process group, its output line by line into the build log, killed with its group past the step
 * timeout or when the build is stopped.
 */
import { spawn } from "node:child_process";
import { mkdir, rm, stat, writeFile } from "node:fs/promises";
import { isAbsolute, join } from "node:path";
import { createInterface } from "node:readline";
import { signalGroup } from "../runtime/mod.ts";
import type { JailSpec, Sandbox } from "../sandbox/mod.ts";
import type { BuildLogLine } from "./_build_log.ts";
import type { BuildPlan } from "./_build_plan.ts";

export type { BuildLogLine } from "./_build_log.ts";

/** A step of the build that failed; the message says which and why. */
export class BuildError extends Error {
  readonly step: string;
  constructor(step: string, message: string) {
    super(message);
    this.name = "BuildError";
    this.step = step;
  }
}

/** The build's dependency layer. */
export interface BuildResult {
  /** `none`: no pip dependencies; `new`: this build made the virtualenv; `cached`: it existed. */
  venv: "none" | "new" | "cached";
  /** The virtualenv's interpreter, when there is one. */
  python?: string;
}

/** Options of `runBuild`. */
export interface RunBuildOptions {
  /** Where the virtualenvs live, one folder per digest. */
  venvsDir: string;
  /** The interpreter a virtualenv is made with. */
  python: string;
  pipIndexUrl?: string;
  pipFindLinks?: string;
  /** RUNPLANE_PIP_ALLOW_UNPINNED: requirement lines may be pip options (`requirementsText`). */
  pipAllowUnpinned?: boolean;
  /** The longest one step may run. */
  timeoutMs: number;
  log(line: BuildLogLine): void;
  signal?: AbortSignal;
  /** Jails every step: the deployment's project, and whether its commands reach public addresses. */
  sandbox: Sandbox;
  projectId: string;
  egress: boolean;
}

const READY = ".runplane-ready";
const LOCK_RETRY_MS = 250;

/** One command of a build step, and the jail it runs in. */
interface StepCommand {
  file: string;
  args: string[];
  shown: string;
  /** The folders it reads and writes, its working directory, its environment (built from scratch). */
  jail: Omit<JailSpec, "projectId" | "egress">;
  /** Whether it reaches public addresses; the app's `[network] egress` when not said. */
  egress?: boolean;
}

/** Runs one command of `step` in its jail, its output into the log; throws a BuildError unless it exits 0. */
async function run(step: string, command: StepCommand, options: RunBuildOptions): Promise<void> {
  options.signal?.throwIfAborted();
  const child = options.sandbox.spawn(command.file, command.args, {
    jail: { ...command.jail, projectId: options.projectId, egress: command.egress ?? options.egress },
    stdio: ["ignore", "pipe", "pipe"],
  });
  for (const stream of ["stdout", "stderr"] as const) {
    createInterface({ input: child[stream]!, crlfDelay: Infinity })
      .on("line", (text) => options.log({ stream, text }));
  }
  let stopped: "timeout" | "aborted" | undefined;
  const stop = (why: "timeout" | "aborted") => {
    stopped ??= why;
    signalGroup(child, "SIGKILL");
  };
  const timer = setTimeout(() => stop("timeout"), options.timeoutMs);
  const onAbort = () => stop("aborted");
  options.signal?.addEventListener("abort", onAbort);
  const outcome = await new Promise<{ code: number | null; error?: Error }>((resolve) => {
    child.once("error", (error) => resolve({ code: null, error }));
    child.once("close", (code) => resolve({ code }));
  }).finally(() => {
    clearTimeout(timer);
    options.signal?.removeEventListener("abort", onAbort);
  });
  if (stopped === "timeout") {
    throw new BuildError(
      step,
      `${step} failed: \`${command.shown}\` ran past the build timeout of ${
        options.timeoutMs / 1000
      } s (RUNPLANE_BUILD_TIMEOUT)`,
    );
  }
  if (stopped === "aborted") throw new BuildError(step, `${step} stopped: the build was cancelled`);
  if (outcome.error) {
    throw new BuildError(step, `${step} failed: \`${command.shown}\` did not start (${outcome.error.message})`);
  }
  if (outcome.code !== 0) {
    throw new BuildError(step, `${step} failed: \`${command.shown}\` exited with code ${outcome.code}`);
  }
}

/** Runs commands with `/bin/sh -c`: the deployment folder writable, the virtualenv (if any) read-only. */
async function shellCommands(
  step: string,
  commands: string[],
  options: RunBuildOptions & { dir: string; venv?: string },
) {
  const { dir, venv } = options;
  const env: Record<string, string> = venv
    ? { VIRTUAL_ENV: venv, PATH: `${join(venv, "bin")}:/usr/local/bin:/usr/bin:/bin` }
    : {};
  const jail = { cwd: dir, writable: [dir], readOnly: venv ? [venv] : [], env };
  const giveBack = await options.sandbox.lend([dir], options.projectId);
  try {
    for (const shown of commands) {
      options.log({ stream: "build", text: `$ ${shown}` });
      await run(step, { file: "/bin/sh", args: ["-c", shown], shown, jail }, options);
    }
  } finally {
    await giveBack();
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

async function exists(path: string): Promise<boolean> {
  return stat(path).then(() => true, () => false);
}

/** The folder of the virtualenv of base-image `digest` (`sha256:<hex>`) under `venvsDir`. */
function virtualenvDir(venvsDir: string, digest: string): string {
  return join(venvsDir, digest.replace(/^sha256:/, ""));
}

/** The interpreter of the virtualenv of base-image `digest` under `venvsDir`. */
export function virtualenvPython(venvsDir: string, digest: string): string {
  return join(virtualenvDir(venvsDir, digest), "bin", "python");
}

/**
 * Whether the virtualenv of `digest` under `venvsDir` is ready (its marker is written last, once pip
 * succeeded): a build of that digest reuses it rather than running pip.
 */
export function virtualenvReady(venvsDir: string, digest: string): Promise<boolean> {
  return exists(join(virtualenvDir(venvsDir, digest), READY));
}

/** Holds the digest's lock while `work` runs: two builds of one digest on a host never race. */
async function withLock<T>(lock: string, options: RunBuildOptions, work: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      await mkdir(lock);
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const age = await stat(lock).then((s) => Date.now() - s.mtimeMs, () => 0);
      // A lock older than a whole step's timeout belongs to a process that died while building.
      if (age > options.timeoutMs + 60_000) await rm(lock, { recursive: true, force: true });
      else await new Promise((resolve) => setTimeout(resolve, LOCK_RETRY_MS));
      options.signal?.throwIfAborted();
    }
  }
  try {
    return await work();
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
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

/** pip's own settings come only from the operator: no pip.conf (the environment has no PIP_* either). */
function pipJail(dir: string, venv: string, options: RunBuildOptions): StepCommand["jail"] {
  const findLinks = options.pipFindLinks && isAbsolute(options.pipFindLinks) ? [options.pipFindLinks] : [];
  return {
    cwd: dir,
    readOnly: [dir, ...findLinks],
    writable: [venv],
    env: { VIRTUAL_ENV: venv, PIP_CONFIG_FILE: "/dev/null", PIP_NO_INPUT: "1" },
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
    await run("pip", { ...command, egress: true }, { ...options, log });
  } catch (error) {
    if (unreachable && error instanceof BuildError) {
      throw new BuildError("pip", `${error.message}: ${PIP_UNREACHABLE_HINT}`);
    }
    throw error;
  }
}

async function pipLayer(dir: string, plan: BuildPlan, options: RunBuildOptions): Promise<BuildResult> {
  if (plan.pipRequirements.length === 0) return { venv: "none" };
  const requirementsFile = requirementsText(plan.pipRequirements, { allowOptions: options.pipAllowUnpinned });
  await mkdir(options.venvsDir, { recursive: true });
  const venv = virtualenvDir(options.venvsDir, plan.digest);
  const python = virtualenvPython(options.venvsDir, plan.digest);
  if (await virtualenvReady(options.venvsDir, plan.digest)) {
    options.log({ stream: "build", text: `==> pip: cached virtualenv ${plan.digest}` });
    return { venv: "cached", python };
  }
  return await withLock<BuildResult>(`${venv}.lock`, options, async () => {
    if (await exists(join(venv, READY))) {
      options.log({ stream: "build", text: `==> pip: cached virtualenv ${plan.digest} (built meanwhile)` });
      return { venv: "cached", python };
    }
    options.log({ stream: "build", text: `==> pip: new virtualenv ${plan.digest}: ${plan.pipRequirements.join(" ")}` });
    // A virtualenv is not relocatable: it is made in place, and only the marker written last makes it usable.
    // It is made writable for the pip step alone (lent to the project's uid), then given back read-only:
    // it is shared by every deployment of the same digest, so no later command of any of them may change it.
    await rm(venv, { recursive: true, force: true });
    await mkdir(venv, { mode: 0o755 });
    const jail = pipJail(dir, venv, options);
    const giveBack = await options.sandbox.lend([venv], options.projectId);
    try {
      await run("pip", {
        file: options.python,
        args: ["-m", "venv", venv],
        shown: `${options.python} -m venv`,
        jail,
        egress: true,
      }, options);
      const requirements = join(venv, "runplane-requirements.txt");
      await writeFile(requirements, requirementsFile);
      const shown = `pip install ${plan.pipRequirements.join(" ")}`;
      await pipInstall({ file: python, args: pipInstallArgs(requirements, options), shown, jail }, options);
    } finally {
      await giveBack();
    }
    await writeFile(join(venv, READY), `${plan.digest}\n`);
    return { venv: "new", python };
  }).catch(async (error) => {
    if (!(await exists(join(venv, READY)))) await rm(venv, { recursive: true, force: true });
    throw error;
  });
}

/** Builds the deployment in `dir` by `plan`; throws a BuildError naming the step that failed. */
export async function runBuild(dir: string, plan: BuildPlan, options: RunBuildOptions): Promise<BuildResult> {
  if (plan.preBuildCommands.length) {
    options.log({ stream: "build", text: "==> pre-build commands" });
    await shellCommands("pre-build", plan.preBuildCommands, { ...options, dir });
  }
  await checkApt(plan.apt, options);
  await checkConda(plan.conda, options);
  const result = await pipLayer(dir, plan, options);
  options.log({ stream: "build", text: "==> code: in place" });
  if (plan.shellCommands.length) {
    options.log({ stream: "build", text: "==> shell commands" });
    const venv = result.python ? join(result.python, "..", "..") : undefined;
    await shellCommands("shell", plan.shellCommands, { ...options, dir, venv });
  }
  return result;
}
