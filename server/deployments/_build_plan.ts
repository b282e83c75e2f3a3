/**
 * What a deployment's build does, read from its `runplane.toml`: the commands and packages of each step,
 * and the base-image digest that names its dependency layer. The digest is the one `createBaseImageHash`
 * answers for the same file (the request is written as `runplane deploy` writes it), so the CLI's
 * `new`/`cached` and the build's reuse of a virtualenv agree.
 */
import { baseImageDigest, type BaseImageRequest } from "../builds/mod.ts";
import { type AppConfig, pipEntryProblem } from "../runtime/mod.ts";

/** A build's steps, in the order they run, and its dependency layer's digest. */
export interface BuildPlan {
  /** `sha256:<hex>`: the base-image digest of the app's dependencies and commands. */
  digest: string;
  preBuildCommands: string[];
  apt: string[];
  conda: string[];
  pipRequirements: string[];
  /**
   * Whether the pip step may read the bundle: some entry is a path, an option or a URL (allowed only by
   * RUNPLANE_PIP_ALLOW_UNPINNED), whose result the digest does not name. Its virtualenv is then the project's.
   */
  pipSeesBundle: boolean;
  shellCommands: string[];
}

const PIP_OPERATOR = /^(===|==|!=|~=|>=|<=|>|<|@)/;

function isAny(version: string): boolean {
  return version === "" || version === "*";
}

/** pip's requirement line for `name` at `version` (`*` any, `1.2` exact, `>=1.2` as written). */
function pipRequirement(name: string, version: string): string {
  return isAny(version) ? name : PIP_OPERATOR.test(version) ? `${name}${version}` : `${name}==${version}`;
}

/** apt's and conda's `name=version`. */
function pinned(name: string, version: string): string {
  return isAny(version) ? name : `${name}=${version}`;
}

function base64(commands: string[]): string[] {
  return commands.map((c) => Buffer.from(c, "utf8").toString("base64"));
}

/** The build plan of an app's settings. */
export function buildPlan(config: Pick<AppConfig, "dependencies" | "build">): BuildPlan {
  const entries = (table: Record<string, string>) => Object.entries(table).map(([n, v]) => [n, v.trim()] as const);
  const pipRequirements = entries(config.dependencies.pip).map(([n, v]) => pipRequirement(n, v));
  const apt = entries(config.dependencies.apt).map(([n, v]) => pinned(n, v));
  const conda = entries(config.dependencies.conda).map(([n, v]) => pinned(n, v));
  const { preBuildCommands, shellCommands, baseImage } = config.build;
  const request: BaseImageRequest = {
    aptPackages: apt,
    condaPackages: conda,
    pipRequirements,
    baseImageUri: baseImage,
    preBuildCommands: base64(preBuildCommands),
    shellCommands: base64(shellCommands),
  };
  const pipSeesBundle = Object.entries(config.dependencies.pip).some(([n, v]) => pipEntryProblem(n, v) !== null);
  return {
    digest: baseImageDigest(request),
    preBuildCommands,
    apt,
    conda,
    pipRequirements,
    pipSeesBundle,
    shellCommands,
  };
}
