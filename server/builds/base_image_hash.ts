import { createHash } from "node:crypto";
import { type FieldError, ProblemError } from "../problems/mod.ts";

/** Bumped whenever the canonical form changes, so old and new digests never collide. */
export const BASE_IMAGE_ALGORITHM = "runplane-base-image/v1";

/** The base image used when a request names none. */
export const DEFAULT_BASE_IMAGE = "debian:bookworm-slim";

/** An app's build dependencies, as the API receives them (commands Base64-encoded). */
export interface BaseImageRequest {
  aptPackages?: string[];
  baseImageUri?: string;
  condaPackages?: string[];
  pipRequirements?: string[];
  preBuildCommands?: string[];
  shellCommands?: string[];
}

/** The normalised request the digest is computed over. */
export interface CanonicalBaseImage {
  algorithm: string;
  baseImageUri: string;
  aptPackages: string[];
  condaPackages: string[];
  pipRequirements: string[];
  preBuildCommands: string[];
  shellCommands: string[];
}

/** A package list as a set: trimmed, blanks dropped, de-duplicated, sorted by code point. */
function packageSet(items: string[] | undefined, normalise: (item: string) => string = (s) => s): string[] {
  const set = new Set<string>();
  for (const item of items ?? []) {
    const trimmed = item.trim().replace(/\s+/g, " ");
    if (trimmed) set.add(normalise(trimmed));
  }
  return [...set].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/** PEP 503: runs of `-`, `_` and `.` become one `-`, lowercased. */
export function normalizePipName(name: string): string {
  return name.replace(/[-_.]+/g, "-").toLowerCase();
}

/**
 * Normalises one pip requirement line: the project name (and extras) as PEP 503 does, whitespace
 * removed from the version specifier, the environment marker kept with single spaces.
 */
export function normalizePipRequirement(line: string): string {
  const [requirement, ...markerParts] = line.split(";");
  const marker = markerParts.join(";").trim().replace(/\s+/g, " ");
  const match = /^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*(.*)$/.exec(requirement);
  if (!match) return line.trim();
  const name = normalizePipName(match[1]);
  const extras = match[2] === undefined
    ? ""
    : `[${packageSet(match[2].split(","), normalizePipName).join(",")}]`;
  const specifier = match[3].replace(/\s+/g, "");
  return `${name}${extras}${specifier}${marker ? `; ${marker}` : ""}`;
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const UTF8 = new TextDecoder("utf-8", { fatal: true });

/** Decodes each Base64 command, order kept; bad ones are added to `errors` as `body.member[index]`. */
function decodeCommands(member: string, commands: string[] | undefined, errors: FieldError[]): string[] {
  return (commands ?? []).map((command, index) => {
    const path = `body.${member}[${index}]`;
    if (!BASE64.test(command)) {
      errors.push({ path, message: "must be valid Base64 (RFC 4648, standard alphabet, padded)" });
      return "";
    }
    try {
      return UTF8.decode(Buffer.from(command, "base64"));
    } catch {
      errors.push({ path, message: "must decode to UTF-8 text" });
      return "";
    }
  });
}

/** Normalises a request into its canonical form; throws a 400 problem for a bad Base64 command. */
export function canonicalBaseImage(request: BaseImageRequest): CanonicalBaseImage {
  const errors: FieldError[] = [];
  const preBuildCommands = decodeCommands("preBuildCommands", request.preBuildCommands, errors);
  const shellCommands = decodeCommands("shellCommands", request.shellCommands, errors);
  if (errors.length) {
    const members = errors.map((e) => e.path.slice("body.".length)).join(", ");
    throw new ProblemError("validation", `Not valid Base64: ${members}; encode each command with Base64`, { errors });
  }
  return {
    algorithm: BASE_IMAGE_ALGORITHM,
    baseImageUri: request.baseImageUri?.trim() || DEFAULT_BASE_IMAGE,
    aptPackages: packageSet(request.aptPackages),
    condaPackages: packageSet(request.condaPackages),
    pipRequirements: packageSet(request.pipRequirements, normalizePipRequirement),
    preBuildCommands,
    shellCommands,
  };
}

/** JSON with object keys sorted at every level, so equal values always serialise to equal bytes. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${
      keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(",")
    }}`;
  }
  return JSON.stringify(value);
}

/** The `sha256:<hex>` digest of a request's canonical form. */
export function baseImageDigest(request: BaseImageRequest): string {
  const canonical = canonicalJson(canonicalBaseImage(request));
  return `sha256:${createHash("sha256").update(canonical).digest("hex")}`;
}
