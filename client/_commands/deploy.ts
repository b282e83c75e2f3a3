import { readFile } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { parse } from "smol-toml";
import { baseImageRequestFromToml } from "../base_image_request.ts";
import { bundleExcluder, packBundle } from "../bundle.ts";
import { type CommandIo, UsageError } from "../cli_command.ts";
import {
  type BaseImageHash,
  type BaseImageRequest,
  type Deployment,
  DEFAULT_FUNCTION,
  type RunplaneClient,
} from "../mod.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { CONNECTION_HELP, CONNECTION_OPTIONS, connect, projectFor, serverUrls } from "./connection.ts";
import { clearProgress, isTerminal, showProgress, writeJson } from "./output.ts";
import { callInstructions } from "../call_instructions.ts";
import { plural } from "../plural.ts";
import { type PythonParameter, pythonParameters } from "../python_signature.ts";
import { commitLabel, workTreeCommit } from "./work_tree.ts";

/** Help of `runplane deploy`. */
export const DEPLOY_HELP = `Usage:
  runplane deploy [dir] [--project <id>] [--app <name>] [--function <name>] [--message <text>]
  runplane deploy --repo <owner>/<repo> [--ref <ref>] [--path <folder>] [--project <id>] --app <name> [--message <text>]

The project defaults to the token's (a token belongs to one project; another --project is refused, 403).

Deploys an app folder (default: the current folder) or a folder of a repository the project's git
integration reaches, follows the build log, and ends with the app's run URL and a curl to call it (its
body built from the function's parameters in main.py, or a placeholder when they are unknown). The app
name defaults to [deployment] name of runplane.toml, else the folder's name. Before uploading, it asks the
server for the base-image digest of the app's dependencies and says what the build will do with that
layer: new (pip will make its virtualenv), cached (a ready one is reused) or none (no [dependencies.pip]).
Skipped when packing: .git, __pycache__, .venv, *.pyc and the patterns of [deployment] exclude. When the
folder is in a git work tree, the deployment records its HEAD commit, and "dirty" when files it uploads
differ from that commit. Exit 1 when the build fails.

  --message <text>   what this version is, kept with the deployment (at most 500 characters)
  --function <name>  the function the printed curl calls (default ${DEFAULT_FUNCTION})
  --no-follow        print the deployment as soon as it is accepted; do not wait for the build

${CONNECTION_HELP}`;

/** What `runplane deploy` reads of a `runplane.toml`. */
interface DeploySettings {
  name?: string;
  exclude: string[];
  runtime: string;
}

function deploySettings(text: string, path: string): DeploySettings {
  let table: Record<string, unknown>;
  try {
    table = parse(text) as Record<string, unknown>;
  } catch (error) {
    throw new Error(`${path}: invalid TOML: ${(error as Error).message.split("\n")[0]}`);
  }
  const deployment = (table.deployment ?? {}) as Record<string, unknown>;
  const exclude = deployment.exclude ?? [];
  if (!Array.isArray(exclude) || !exclude.every((e) => typeof e === "string")) {
    throw new Error(`${path}: [deployment] exclude must be a list of patterns, e.g. ["data/**", "*.log"]`);
  }
  return {
    name: typeof deployment.name === "string" ? deployment.name : undefined,
    exclude,
    runtime: typeof deployment.runtime === "string" ? deployment.runtime : "python",
  };
}

function kib(bytes: number): string {
  return bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** What the build will do with the dependency layer, for people. */
function dependencyLayer(layer: BaseImageHash, request: BaseImageRequest): string {
  if (!request.pipRequirements?.length) return `none: no [dependencies.pip] (${layer.digest})`;
  return layer.status === "new"
    ? `new: pip will make its virtualenv (${layer.digest})`
    : `cached: its virtualenv is reused (${layer.digest})`;
}

/** `[#####     ]  50%`. */
export function progressBar(fraction: number, width = 24): string {
  const done = Math.round(Math.min(1, Math.max(0, fraction)) * width);
  return `[${"#".repeat(done)}${" ".repeat(width - done)}] ${String(Math.round(fraction * 100)).padStart(3)}%`;
}

/** The parameters of `name` in the folder's `main.py` (the Python runtime's module); null when not known. */
async function functionParameters(dir: string, settings: DeploySettings, name: string) {
  if (settings.runtime !== "python") return null;
  const source = await readFile(join(dir, "main.py"), "utf8").catch(() => null);
  return source === null ? null : pythonParameters(source, name);
}

/** Follows the build to its end, printing each line; resolves with the deployment and the last lines. */
async function followBuild(
  io: CommandIo,
  client: RunplaneClient,
  target: { app: string; deploymentId: string; quiet: boolean },
): Promise<{ deployment: Deployment; tail: string[] }> {
  const tail: string[] = [];
  for await (const event of client.followDeploymentLogs(target.app, target.deploymentId, { signal: io.signal })) {
    if ("end" in event) return { deployment: event.end, tail };
    tail.push(event.line);
    if (tail.length > 20) tail.shift();
    if (!target.quiet) io.stdout.write(`  ${stripTerminalControls(event.line)}\n`);
  }
  // The stream ended without an outcome (the server stopped): ask for the deployment as it stands.
  return { deployment: await client.getDeployment(target.app, target.deploymentId), tail };
}

/** `runplane deploy`. */
export async function deployCommand(io: CommandIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args: io.args,
    allowPositionals: true,
    options: {
      ...CONNECTION_OPTIONS,
      project: { type: "string" },
      app: { type: "string" },
      function: { type: "string" },
      repo: { type: "string" },
      ref: { type: "string" },
      path: { type: "string" },
      message: { type: "string" },
      "no-follow": { type: "boolean", default: false },
    },
  });
  const project = projectFor(values.project, { flags: values, env: io.env, command: "deploy" });
  if (positionals.length > 1) throw new UsageError("deploy takes at most one folder");
  const client = connect(values, io.env);
  const say = (line: string) => values.json || io.stdout.write(`${line}\n`);
  let app: string;
  let accepted: Deployment;
  const functionName = values.function ?? DEFAULT_FUNCTION;
  let parameters: PythonParameter[] | null = null;
  if (values.repo) {
    if (positionals.length) throw new UsageError("deploy takes a folder or --repo, not both");
    const [owner, repo, ...rest] = values.repo.split("/");
    if (!owner || !repo || rest.length) throw new UsageError("--repo must be <owner>/<repo>");
    if (!values.app) throw new UsageError("deploy --repo needs --app");
    app = `${project}/${values.app}`;
    accepted = await client.createDeployment(app, {
      source: {
        owner,
        repo,
        ...(values.ref ? { ref: values.ref } : {}),
        ...(values.path ? { path: values.path } : {}),
      },
    }, { signal: io.signal, message: values.message });
    say(
      `Deploying ${values.repo}${values.path ? `/${values.path}` : ""}${values.ref ? `@${values.ref}` : ""} as ${app}`,
    );
  } else {
    if (values.ref || values.path) throw new UsageError("--ref and --path go with --repo");
    const dir = resolve(positionals[0] ?? ".");
    const tomlPath = join(dir, "runplane.toml");
    const text = await readFile(tomlPath, "utf8").catch((error: NodeJS.ErrnoException) => {
      throw new Error(`Cannot read ${tomlPath} (${error.code}): deploy a folder that holds the app's runplane.toml`);
    });
    const settings = deploySettings(text, tomlPath);
    parameters = await functionParameters(dir, settings, functionName);
    app = `${project}/${values.app ?? settings.name ?? basename(dir)}`;
    let request;
    try {
      request = baseImageRequestFromToml(text);
    } catch (error) {
      throw new Error(`${tomlPath}: ${(error as Error).message}`);
    }
    const layer = await client.baseImageHash(app, request, { signal: io.signal });
    say(`Dependency layer: ${dependencyLayer(layer, request)}`);
    const bundle = await packBundle(dir, { exclude: settings.exclude });
    const source = await workTreeCommit(dir, bundleExcluder(settings.exclude));
    say(
      `Packed ${plural(bundle.files, "file")} (${kib(bundle.bytes.length)})${
        source ? ` at commit ${commitLabel(source)}` : ""
      }`,
    );
    try {
      accepted = await client.createDeployment(app, bundle.bytes, {
        signal: io.signal,
        message: values.message,
        commit: source?.commit,
        dirty: source?.dirty,
        onUploadProgress: isTerminal(io.stderr)
          ? (sent, total) => showProgress(io, `Uploading ${progressBar(sent / total)} ${kib(sent)} of ${kib(total)}`)
          : undefined,
      });
    } finally {
      clearProgress(io);
    }
    say(`Uploaded: deployment ${accepted.deployment_id} of ${app}`);
  }
  if (values["no-follow"]) {
    if (values.json) writeJson(io, accepted);
    else say(`Follow it with: runplane deployments logs ${app} ${accepted.deployment_id} --follow`);
    return 0;
  }
  say("Build log:");
  const { deployment, tail } = await followBuild(io, client, {
    app,
    deploymentId: accepted.deployment_id,
    quiet: values.json,
  });
  if (values.json) writeJson(io, deployment);
  if (deployment.status !== "ready") {
    io.stderr.write(`Build failed: ${stripTerminalControls(deployment.error ?? deployment.status)}\n`);
    if (values.json && tail.length) {
      io.stderr.write(`Last lines of the build log:\n${tail.map((l) => `  ${stripTerminalControls(l)}`).join("\n")}\n`);
    }
    return 1;
  }
  const name = app.split("/")[1];
  say(`Ready: ${app} serves deployment ${deployment.deployment_id}`);
  const image = deployment.image;
  if (image) say(stripTerminalControls(`It runs in the image ${image.reference} (${image.digest})`));
  say(
    callInstructions(serverUrls(values, io.env).apiUrl, { project, app: name, function: functionName }, parameters),
  );
  return 0;
}
