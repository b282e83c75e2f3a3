/**
 * Runs a Dockerfile's steps (`_dockerfile.ts`) into an image root of the project's own: a copy of the FROM
 * image's root given to the project's uid, each RUN, COPY and WORKDIR a command in the WRITABLE image jail as
 * uid 0 of its own user namespace (with the build's egress), never through a builder's own isolation
 * (docs/security.md, "Images"). COPY is done in the jail too, by the image's `cp`, from the bundle the
 * server put in the fresh copy before any step ran: afterwards the server never writes the copy, whose
 * links are the tenant's.
 *
 * Its root is the project's alone (it saw the bundle): named by the digest of the project, the FROM image's
 * digest, the bundle's digest and the Dockerfile's text, under `<data>/image-layers/<hex>/`, with
 * `<hex>.ready` written last by the server; a redeploy of the same bundle builds nothing.
 */
import { createHash } from "node:crypto";
import { type Dirent } from "node:fs";
import { cp, lstat, mkdir, readdir, rename, rm, writeFile } from "node:fs/promises";
import { join, posix } from "node:path";
import { copyImageRoot } from "../sandbox/mod.ts";
import { BuildError, runStep, type StepOptions, withLock } from "./_build_step.ts";
import type { DockerfilePlan, DockerfileStep } from "./_dockerfile.ts";

/** Where a Dockerfile's image root is on this host. */
export interface DockerfileLayer {
  /** The hex digest of its inputs. */
  key: string;
  /** Its root file system, once ready. */
  dir: string;
}

/** The layer of a Dockerfile of `projectId` on the image `baseDigest` with the bundle `bundleDigest`. */
export function dockerfileLayer(
  text: string,
  options: { projectId: string; baseDigest: string; bundleDigest: string; layersDir: string },
): DockerfileLayer {
  const key = createHash("sha256")
    .update(["dockerfile", options.projectId, options.baseDigest, options.bundleDigest, text].join("\0"))
    .digest("hex");
  return { key, dir: join(options.layersDir, key) };
}

/** Where the bundle is in the copy while its steps run (removed before it is ready). */
const CONTEXT = "/.runplane-context";

function ready(layer: DockerfileLayer): Promise<boolean> {
  return lstat(`${layer.dir}.ready`).then((stat) => stat.isFile(), () => false);
}

/** What each step of the build is told. */
export interface DockerfileBuildOptions extends StepOptions {
  /** The FROM image's root (read-only, shared). */
  base: string;
  /** The FROM image's ENV (filtered by the rules of [env]): under each RUN's own. */
  baseEnv: Record<string, string>;
  /** The unpacked bundle, as the server wrote it (no tenant command ran in it yet): COPY's sources. */
  context: string;
  /** Keeps the variables a RUN may get (the rules of [env]); `_image_step.ts`'s `allowedEnvironment`. */
  allowed(env: Record<string, string>): Record<string, string>;
}

/**
 * apt drops to its `_apt` user to download, which a user namespace of one uid does not have: told to stay
 * root, so `RUN apt-get update && apt-get install -y x` works unchanged. Written by a jailed step.
 */
const PREPARE_SCRIPT = [
  "set -e",
  "if [ -d /etc/apt ]; then",
  "  mkdir -p /etc/apt/apt.conf.d",
  "  echo 'APT::Sandbox::User \"root\";' > /etc/apt/apt.conf.d/00runplane-sandbox",
  "fi",
].join("\n");

/** COPY in the jail: `dir|file SOURCE TARGET` triples as arguments, never as shell text. */
const COPY_SCRIPT = [
  "set -e",
  'while [ "$#" -ge 3 ]; do',
  '  case "$1" in',
  '    dir) mkdir -p -- "$3"; cp -R --preserve=mode,timestamps -- "$2/." "$3/" ;;',
  '    file) mkdir -p -- "$(dirname -- "$3")"; cp --preserve=mode,timestamps -- "$2" "$3" ;;',
  "  esac",
  "  shift 3",
  "done",
].join("\n");

/** The bundle's entries, relative, as the server unpacked them (a tree no tenant command has written yet). */
async function contextEntries(context: string): Promise<Map<string, "dir" | "file">> {
  const entries = new Map<string, "dir" | "file">([[".", "dir"]]);
  const found: Dirent[] = await readdir(context, { recursive: true, withFileTypes: true });
  for (const entry of found) {
    const rel = posix.relative(context, join(entry.parentPath ?? entry.path, entry.name));
    if (entry.isDirectory()) entries.set(rel, "dir");
    else if (entry.isFile()) entries.set(rel, "file");
  }
  return entries;
}

function globPattern(source: string): RegExp {
  const escaped = source.replace(/[.+^${}()|\\]/g, "\\$&").replace(/\*/g, "[^/]*").replace(/\?/g, "[^/]");
  return new RegExp(`^${escaped}$`);
}

/** COPY's `dir|file source target` triples; a source the bundle lacks fails the build, naming it. */
function copyTriples(
  step: DockerfileStep & { kind: "copy" },
  options: { context: string; entries: Map<string, "dir" | "file"> },
): string[] {
  const triples: string[] = [];
  for (const source of step.sources) {
    const matched = /[*?[]/.test(source)
      ? [...options.entries.keys()].filter((rel) => rel !== "." && globPattern(source).test(rel))
      : options.entries.has(source)
      ? [source]
      : [];
    if (matched.length === 0) {
      throw new BuildError(
        "dockerfile",
        `dockerfile failed: line ${step.line}: ${step.shown}: ${JSON.stringify(source)} is not in the bundle`,
      );
    }
    for (const rel of matched) {
      const kind = options.entries.get(rel)!;
      const target = kind === "file" && step.intoFolder ? posix.join(step.dest, posix.basename(rel)) : step.dest;
      triples.push(kind, posix.join(CONTEXT, rel), target);
    }
  }
  return triples;
}

/** Runs one step in the jail of `root`; a failure names the instruction, its line and its last output. */
async function jailedStep(
  step: DockerfileStep,
  options: DockerfileBuildOptions & { root: string; entries: Map<string, "dir" | "file"> },
): Promise<void> {
  const jailOptions = { ...options, image: { root: options.root, writable: true } };
  const command = step.kind === "run"
    ? {
      file: step.argv[0],
      args: step.argv.slice(1),
      jail: { cwd: step.cwd, env: { ...options.baseEnv, ...options.allowed(step.env) } },
    }
    : step.kind === "workdir"
    ? { file: "/bin/sh", args: ["-c", 'mkdir -p -- "$1"', "sh", step.dir], jail: { cwd: "/", env: {} } }
    : step.kind === "copy"
    ? {
      file: "/bin/sh",
      args: ["-c", COPY_SCRIPT, "sh", ...copyTriples(step, options)],
      jail: { cwd: "/", env: {} },
    }
    : undefined;
  if (!command) return;
  try {
    await runStep("dockerfile", { ...command, shown: step.shown, egress: true }, jailOptions);
  } catch (error) {
    if (!(error instanceof BuildError) || error.message.includes("stopped")) throw error;
    // runStep's message ends with the step's last lines of output.
    const why = error.message.replace(`dockerfile failed: \`${step.shown}\` `, "");
    throw new BuildError("dockerfile", `dockerfile failed: line ${step.line}: ${step.shown}: ${why}`);
  }
}

/** The steps in order, each said in the log with its number, what it did and how long it took. */
async function runSteps(plan: DockerfilePlan, options: DockerfileBuildOptions & { root: string }): Promise<void> {
  const entries = await contextEntries(options.context);
  const prepare = { file: "/bin/sh", args: ["-c", PREPARE_SCRIPT], shown: "apt's sandbox user set to root" };
  await runStep("dockerfile", { ...prepare, jail: { cwd: "/", env: {} } }, {
    ...options,
    image: { root: options.root, writable: true },
  });
  const total = plan.steps.length + 1;
  options.log({ stream: "build", text: `==> dockerfile: [1/${total}] FROM ${plan.from.reference}` });
  for (const [index, step] of plan.steps.entries()) {
    const started = performance.now();
    const head = `==> dockerfile: [${index + 2}/${total}] ${step.shown}`;
    if (step.kind === "note") {
      options.log({ stream: "build", text: `${head}: ${step.note}` });
      continue;
    }
    options.log({ stream: "build", text: head });
    await jailedStep(step, { ...options, entries });
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    options.log({ stream: "build", text: `==> dockerfile: [${index + 2}/${total}] done (${seconds} s)` });
  }
  // The bundle's copy leaves the image: removed in the jail, by its fixed path inside.
  await runStep("dockerfile", {
    file: "/bin/sh",
    args: ["-c", 'rm -rf -- "$1"', "sh", CONTEXT],
    shown: `rm -rf ${CONTEXT}`,
    jail: { cwd: "/", env: {} },
  }, { ...options, image: { root: options.root, writable: true } });
}

/**
 * Puts the bundle in the fresh copy `root` at `CONTEXT`, given to the project: COPY's sources, read in the
 * jail. (Bound from the data dir it could not be: bubblewrap runs as the project's uid, which cannot walk
 * the 0700 data dir.) Done before any step ran, so nothing tenant-run has written the copy yet; `mkdir`
 * fails on a name the image already has, a link above all, and `cp` walks only the bundle the server
 * unpacked (bundles hold no links).
 */
async function placeContext(root: string, options: DockerfileBuildOptions): Promise<void> {
  const target = join(root, CONTEXT);
  try {
    await mkdir(target, { mode: 0o755 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    throw new BuildError(
      "dockerfile",
      `dockerfile failed: the FROM image has ${CONTEXT} already; Runplane's build uses it`,
    );
  }
  await cp(options.context, target, { recursive: true, preserveTimestamps: true, verbatimSymlinks: true });
  await options.sandbox.handOver(target, options.projectId);
}

/**
 * Builds `layer` from `plan` unless it is ready; answers its root and whether this build made it. Throws a
 * BuildError naming the failed instruction and its line.
 */
export async function buildDockerfileLayer(
  layer: DockerfileLayer,
  options: DockerfileBuildOptions & { plan: DockerfilePlan },
): Promise<{ root: string; status: "new" | "cached" }> {
  const { plan } = options;
  const shown = `image sha256:${layer.key}`;
  const cached = (why: string) => {
    const total = plan.steps.length + 1;
    options.log({ stream: "build", text: `==> dockerfile: [1/${total}] FROM ${plan.from.reference}: cached` });
    for (const [index, step] of plan.steps.entries()) {
      options.log({ stream: "build", text: `==> dockerfile: [${index + 2}/${total}] ${step.shown}: cached` });
    }
    options.log({ stream: "build", text: `==> dockerfile: cached ${shown}${why}` });
    return { root: layer.dir, status: "cached" as const };
  };
  if (await ready(layer)) return cached("");
  await mkdir(join(layer.dir, ".."), { recursive: true, mode: 0o700 });
  return await withLock(`${layer.dir}.lock`, options, async () => {
    if (await ready(layer)) return cached(" (built meanwhile)");
    const started = performance.now();
    options.log({ stream: "build", text: `==> dockerfile: new ${shown}` });
    // Left by a build that stopped (the lock is ours, no process of the project's build runs in it any
    // more): rm removes a link it meets, never what the link names. Both paths are <layers>/<64 hex>.
    const partial = `${layer.dir}.partial`;
    await rm(partial, { recursive: true, force: true });
    await rm(layer.dir, { recursive: true, force: true });
    await copyImageRoot(options.base, partial, { principal: options.projectId });
    await placeContext(partial, options);
    await runSteps(plan, { ...options, root: partial });
    await rename(partial, layer.dir);
    await writeFile(`${layer.dir}.ready`, `sha256:${layer.key}\n`, { flag: "wx", mode: 0o644 });
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    options.log({ stream: "build", text: `==> dockerfile: built ${shown} (${seconds} s)` });
    return { root: layer.dir, status: "new" as const };
  }).catch(async (error) => {
    if (!(await ready(layer))) await rm(`${layer.dir}.partial`, { recursive: true, force: true });
    throw error;
  });
}
