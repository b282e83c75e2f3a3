/**
 * A Dockerfile read into the steps Runplane runs itself (`[runtime.custom] dockerfile`, issue 46): parsed
 * with dockerfile-ast (the parser of the VS Code Docker language server), each instruction checked and
 * its variables expanded here. Nothing here runs anything; `_dockerfile_build.ts` runs the steps, every
 * tenant command in Runplane's own jail. What each instruction does is in docs/runplane-toml.md.
 */
import { DockerfileParser, type Instruction, ModifiableInstruction, PropertyInstruction } from "dockerfile-ast";
import { posix } from "node:path";

/** A Dockerfile Runplane does not build; the message names the instruction and its line. */
export class DockerfileError extends Error {
  override name = "DockerfileError";
}

/** A command as the Dockerfile wrote it: exec form (JSON argv) or shell form (text). */
export type CommandForm = { exec: string[] } | { shell: string };

/** One step of the build, in the Dockerfile's order. */
export type DockerfileStep =
  & { line: number; shown: string }
  & (
    /** argv run in the image as its inside-root, with `env` (ARG and ENV so far) and `cwd` (WORKDIR). */
    | { kind: "run"; argv: string[]; env: Record<string, string>; cwd: string }
    /** Bundle files (context-relative, normal, may hold `*` `?` `[…]`) copied to `dest` (absolute). */
    | { kind: "copy"; sources: string[]; dest: string; intoFolder: boolean }
    /** `dir` made in the image: the later steps' and the replica's working directory. */
    | { kind: "workdir"; dir: string }
    /** Recorded (ENV, ARG, CMD, EXPOSE…) or ignored (LABEL…): said in the log, nothing run. */
    | { kind: "note"; note: string }
  );

/** What a Dockerfile builds. */
export interface DockerfilePlan {
  /** The image of FROM, as written (initial ARGs expanded) and its line. */
  from: { reference: string; line: number };
  steps: DockerfileStep[];
  /** The ENV it sets (not its ARGs), on top of the base image's. */
  env: Record<string, string>;
  entrypoint?: CommandForm;
  cmd?: CommandForm;
  /** The first TCP port it EXPOSEs. */
  port?: number;
  /** Its last WORKDIR. */
  workingDir?: string;
  /** The shell of shell forms (SHELL), `/bin/sh -c` by default. */
  shell: string[];
}

/** Instructions that only change what the image records, or that Runplane ignores: said why in the log. */
const IGNORED: Record<string, string> = {
  LABEL: "ignored (labels are not kept)",
  MAINTAINER: "ignored",
  STOPSIGNAL: "ignored (a replica is stopped with SIGTERM, then SIGKILL)",
  HEALTHCHECK: "ignored (use [runtime.custom] healthcheck_endpoint)",
  VOLUME: "ignored (use [volumes])",
  ONBUILD: "ignored (nothing builds on this image)",
};

const ADD_ARCHIVE = /\.(tar|tgz|tbz2?|txz|tzst|tar\.(gz|bz2|xz|zst|lz|lzma|Z))$/;

/**
 * `text` with `$NAME`, `${NAME}`, `${NAME:-word}` and `${NAME:+word}` replaced from `vars` (unset: empty)
 * and `\$` kept as `$`: the substitution of Dockerfile instructions other than RUN, CMD and ENTRYPOINT.
 */
export function expandVariables(text: string, vars: Record<string, string>): string {
  return text.replace(
    /\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (match, braced?: string, op?: string, word?: string, bare?: string) => {
      if (match === "\\$") return "$";
      const value = vars[(braced ?? bare)!];
      if (op === "-") return value ? value : expandVariables(word ?? "", vars);
      if (op === "+") return value ? expandVariables(word ?? "", vars) : "";
      return value ?? "";
    },
  );
}

/** An exec form (`["a", "b"]`, strict JSON of strings) or the text itself. */
function commandForm(text: string): CommandForm {
  const trimmed = text.trim();
  if (trimmed.startsWith("[")) {
    try {
      const parsed: unknown = JSON.parse(trimmed);
      if (Array.isArray(parsed) && parsed.every((item) => typeof item === "string")) return { exec: parsed };
    } catch {
      // Not JSON: Docker runs it as a shell form too.
    }
  }
  return { shell: trimmed };
}

/** `form` as an argv. */
export function commandArgv(form: CommandForm, shell: readonly string[]): string[] {
  return "exec" in form ? form.exec : [...shell, form.shell];
}

/** A context-relative source: `..` may not leave the bundle; an absolute one is read from the bundle's root. */
function contextSource(source: string, where: string): string {
  const normal = posix.normalize(`/${source}`);
  if (source.split("/").includes("..") && posix.normalize(source).startsWith("..")) {
    throw new DockerfileError(`${where}: ${JSON.stringify(source)} is outside the bundle (the build's context)`);
  }
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(source)) {
    throw new DockerfileError(`${where}: ${JSON.stringify(source)} is a URL; copy files of the bundle only`);
  }
  return normal === "/" ? "." : normal.slice(1).replace(/\/+$/, "");
}

/** The state read so far while walking the instructions. */
interface Walk {
  plan: DockerfilePlan;
  /** ARG and ENV so far: what `$NAME` expands to (the base image's ENV under them). */
  vars: Record<string, string>;
  /** ARG defaults and ENV so far: a RUN's environment. */
  runEnv: Record<string, string>;
  cwd: string;
}

function flagsOf(instruction: Instruction): Array<{ name: string; value: string | null }> {
  if (!(instruction instanceof ModifiableInstruction)) return [];
  return instruction.getFlags().map((flag) => ({ name: flag.getName(), value: flag.getValue() }));
}

/** COPY and ADD: sources of the bundle only; `--chown` and `--chmod` ignored (said in the note). */
function copyStep(instruction: Instruction, walk: Walk, where: string): DockerfileStep {
  const keyword = instruction.getKeyword();
  const notes: string[] = [];
  for (const flag of flagsOf(instruction)) {
    if (flag.name === "chown" || flag.name === "chmod" || flag.name === "link") {
      notes.push(`--${flag.name} ignored: every file of the image is the project's, read-only to its replicas`);
    } else if (flag.name === "from") {
      throw new DockerfileError(`${where}: COPY --from needs another stage; Runplane builds single-stage Dockerfiles`);
    } else throw new DockerfileError(`${where}: ${keyword} --${flag.name} is not supported`);
  }
  const form = commandForm(instruction.getArgumentsContent() ?? "");
  const words = "exec" in form ? form.exec : instruction.getArguments().map((argument) => argument.getValue());
  const expanded = words.map((word) => expandVariables(word, walk.vars));
  if (expanded.length < 2) throw new DockerfileError(`${where}: ${keyword} needs a source and a destination`);
  const destText = expanded.at(-1)!;
  const sources = expanded.slice(0, -1).map((source) => {
    if (keyword === "ADD" && ADD_ARCHIVE.test(source)) {
      throw new DockerfileError(
        `${where}: ADD would unpack ${JSON.stringify(source)}; Runplane does not: COPY it and unpack it with RUN tar`,
      );
    }
    return contextSource(source, where);
  });
  const intoFolder = destText.endsWith("/") || sources.length > 1 || /[*?[]/.test(sources.join(""));
  return {
    kind: "copy",
    line: 0,
    shown: `${keyword} ${instruction.getArgumentsContent()}${notes.length ? ` (${notes.join("; ")})` : ""}`,
    sources,
    dest: posix.resolve(walk.cwd, destText),
    intoFolder,
  };
}

/** ENV and ARG: the variables of later instructions (ARG's without a default stay unset). */
function setVariables(instruction: PropertyInstruction, walk: Walk): void {
  for (const property of instruction.getProperties()) {
    const name = property.getName();
    const raw = property.getValue();
    if (instruction.getKeyword() === "ARG") {
      if (raw === null || name in walk.plan.env) continue; // An ENV of the same name wins over an ARG.
      const value = expandVariables(raw, walk.vars);
      walk.vars[name] = value;
      walk.runEnv[name] = value;
    } else {
      const value = expandVariables(raw ?? "", walk.vars);
      walk.vars[name] = value;
      walk.runEnv[name] = value;
      walk.plan.env[name] = value;
    }
  }
}

/** The first TCP port of an EXPOSE (`8080`, `8080/tcp`, `8000-8010`). */
function exposedPort(words: string[], where: string): number | undefined {
  for (const word of words) {
    const match = /^(\d+)(?:-\d+)?(?:\/(tcp|udp|sctp))?$/i.exec(word);
    if (!match) throw new DockerfileError(`${where}: EXPOSE ${JSON.stringify(word)} is not a port`);
    const port = Number(match[1]);
    if ((match[2] ?? "tcp").toLowerCase() === "tcp" && port >= 1 && port <= 65535) return port;
  }
  return undefined;
}

/** One instruction after FROM into `walk`'s plan. */
function step(instruction: Instruction, walk: Walk): void {
  const keyword = instruction.getKeyword();
  const line = instruction.getRange().start.line + 1;
  const where = `line ${line}`;
  const content = instruction.getArgumentsContent() ?? "";
  const shown = `${keyword} ${content}`;
  const { plan } = walk;
  const note = (text: string) => void plan.steps.push({ kind: "note", line, shown, note: text });
  const words = () => instruction.getArguments().map((argument) => expandVariables(argument.getValue(), walk.vars));
  switch (keyword) {
    case "RUN": {
      const flags = flagsOf(instruction);
      if (flags.length) throw new DockerfileError(`${where}: RUN --${flags[0].name} is not supported`);
      const argv = commandArgv(commandForm(content), plan.shell);
      plan.steps.push({ kind: "run", line, shown, argv, env: { ...walk.runEnv }, cwd: walk.cwd });
      return;
    }
    case "COPY":
    case "ADD":
      plan.steps.push({ ...copyStep(instruction, walk, where), line });
      return;
    case "WORKDIR":
      walk.cwd = posix.resolve(walk.cwd, expandVariables(content.trim(), walk.vars));
      plan.workingDir = walk.cwd;
      plan.steps.push({ kind: "workdir", line, shown, dir: walk.cwd });
      return;
    case "ENV":
    case "ARG":
      setVariables(instruction as PropertyInstruction, walk);
      return note(keyword === "ENV" ? "set for the later steps and the replicas" : "set for the later steps");
    case "CMD":
    case "ENTRYPOINT":
      // Docker's rule: an ENTRYPOINT drops the CMD set before it (an inherited one included).
      if (keyword === "ENTRYPOINT") plan.cmd = undefined;
      plan[keyword === "CMD" ? "cmd" : "entrypoint"] = commandForm(content);
      return note("the replica's command unless [runtime.custom] entrypoint is given");
    case "EXPOSE":
      plan.port ??= exposedPort(words(), where);
      return note("the first TCP port is the replica's unless [runtime.custom] port is given");
    case "USER":
      return note("replaced by the project's uid: replicas run as the project's own uid, never as the image's user");
    case "SHELL": {
      const form = commandForm(content);
      if (!("exec" in form) || form.exec.length === 0) {
        throw new DockerfileError(`${where}: SHELL takes a JSON array such as ["/bin/bash", "-c"]`);
      }
      plan.shell = form.exec;
      return note("the shell of later shell forms");
    }
    case "FROM":
      throw new DockerfileError(`${where}: a second FROM; Runplane builds single-stage Dockerfiles (one FROM)`);
    default:
      if (keyword in IGNORED) return note(IGNORED[keyword]);
      throw new DockerfileError(`${where}: unknown instruction ${keyword}`);
  }
}

/** FROM's reference (its initial ARGs expanded): one stage, no `AS`, not `scratch`. */
function fromOf(instruction: Instruction, vars: Record<string, string>): DockerfilePlan["from"] {
  const line = instruction.getRange().start.line + 1;
  const where = `line ${line}`;
  const flags = flagsOf(instruction);
  if (flags.length) throw new DockerfileError(`${where}: FROM --${flags[0].name} is not supported`);
  const words = instruction.getArguments().map((argument) => expandVariables(argument.getValue(), vars));
  if (words.length > 1) {
    throw new DockerfileError(
      `${where}: FROM … AS names a build stage; Runplane builds single-stage Dockerfiles (FROM <image> only)`,
    );
  }
  const reference = words[0] ?? "";
  if (reference === "") throw new DockerfileError(`${where}: FROM names no image`);
  if (reference === "scratch") {
    throw new DockerfileError(`${where}: FROM scratch is not supported; start from an image with a shell`);
  }
  return { reference, line };
}

/**
 * Reads a Dockerfile's `text` into its steps. `base` is the FROM image's, once pulled: its ENV is what `$NAME`
 * expands to where the Dockerfile sets no such variable, its WORKDIR the first working directory. Throws
 * DockerfileError naming the line.
 */
export function parseDockerfile(
  text: string,
  options: { base?: { env: Record<string, string>; workingDir: string | null } } = {},
): DockerfilePlan {
  const dockerfile = DockerfileParser.parse(text);
  const instructions = dockerfile.getInstructions();
  const initial: Record<string, string> = {};
  let index = 0;
  for (; index < instructions.length && instructions[index].getKeyword() === "ARG"; index++) {
    for (const property of (instructions[index] as PropertyInstruction).getProperties()) {
      initial[property.getName()] = expandVariables(property.getValue() ?? "", initial);
    }
  }
  const first = instructions[index];
  if (first?.getKeyword() !== "FROM") {
    const where = first ? `line ${first.getRange().start.line + 1}: ${first.getKeyword()}` : "the file is empty";
    throw new DockerfileError(`${where}: a Dockerfile starts with FROM (only ARG may come before it)`);
  }
  const plan: DockerfilePlan = { from: fromOf(first, initial), steps: [], env: {}, shell: ["/bin/sh", "-c"] };
  const cwd = options.base?.workingDir?.startsWith("/") ? posix.normalize(options.base.workingDir) : "/";
  const walk: Walk = { plan, vars: { ...options.base?.env }, runEnv: {}, cwd };
  for (const instruction of instructions.slice(index + 1)) step(instruction, walk);
  return plan;
}
