/**
 * Turning an app's `runplane.toml` into a base-image request: `[dependencies.pip|apt|conda]` tables
 * (name → version) and `[build] base_image, shell_commands, pre_build_commands`, with every command
 * Base64-encoded as the contract asks.
 */
import { parse } from "smol-toml";
import type { BaseImageRequest } from "./mod.ts";

type Table = Record<string, unknown>;

const PIP_OPERATOR = /^(===|==|!=|~=|>=|<=|>|<|@)/;

function isAny(version: string): boolean {
  return version === "" || version === "*";
}

/** How each package manager writes "name at version". */
const SPEC_WRITERS: Record<"pip" | "apt" | "conda", (name: string, version: string) => string> = {
  pip: (name, version) =>
    isAny(version) ? name : PIP_OPERATOR.test(version) ? `${name}${version}` : `${name}==${version}`,
  apt: (name, version) => isAny(version) ? name : `${name}=${version}`,
  conda: (name, version) => isAny(version) ? name : `${name}=${version}`,
};

function packageSpecs(section: unknown, manager: "pip" | "apt" | "conda"): string[] | undefined {
  if (section === undefined) return undefined;
  if (Array.isArray(section) && section.every((s) => typeof s === "string")) return section as string[];
  if (typeof section !== "object" || section === null || Array.isArray(section)) {
    throw new Error(`[dependencies.${manager}] must be a table of package names to versions, e.g. requests = "2.32.0"`);
  }
  return Object.entries(section as Table).map(([name, version]) => {
    if (typeof version !== "string") {
      throw new Error(`[dependencies.${manager}] ${name} must be a version string ("*" for any version)`);
    }
    return SPEC_WRITERS[manager](name, version.trim());
  });
}

function commands(build: Table, key: string): string[] | undefined {
  const value = build[key];
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || !value.every((c) => typeof c === "string")) {
    throw new Error(`[build] ${key} must be a list of shell commands (strings)`);
  }
  return value.map((c: string) => Buffer.from(c, "utf8").toString("base64"));
}

/**
 * The base-image request described by the text of a `runplane.toml`. Throws an Error naming the
 * section at fault when the TOML is invalid or a section has the wrong shape.
 */
export function baseImageRequestFromToml(text: string): BaseImageRequest {
  let config: Table;
  try {
    config = parse(text) as Table;
  } catch (error) {
    throw new Error(`Invalid TOML: ${(error as Error).message.split("\n")[0]}`);
  }
  const dependencies = (config.dependencies ?? {}) as Table;
  const build = (config.build ?? {}) as Table;
  if (build.base_image !== undefined && typeof build.base_image !== "string") {
    throw new Error("[build] base_image must be an image reference such as python:3.12-slim");
  }
  const request: BaseImageRequest = {
    aptPackages: packageSpecs(dependencies.apt, "apt"),
    condaPackages: packageSpecs(dependencies.conda, "conda"),
    pipRequirements: packageSpecs(dependencies.pip, "pip"),
    baseImageUri: build.base_image as string | undefined,
    preBuildCommands: commands(build, "pre_build_commands"),
    shellCommands: commands(build, "shell_commands"),
  };
  return Object.fromEntries(Object.entries(request).filter(([, v]) => v !== undefined)) as BaseImageRequest;
}
