/**
 * OCI image references (`[build] base_image`): parsed by the grammar of the distribution project's
 * `reference` package (the one Docker, Podman, skopeo and buildah share), with Docker Hub's implicit
 * `docker.io` and `library/`, and checked against the operator's allow-list of registries.
 *
 * The parsed reference is handed to tools as one argv entry, never to a shell; the grammar admits only
 * letters, digits and `.` `_` `-` `/` `:` `@`, so no shell metacharacter, space or option-like leading `-`
 * can pass whatever a caller does with it later.
 */

/** A parsed, normalised image reference. */
export interface ImageReference {
  /** The registry host, lowercase, with its port when one was written: `docker.io`, `127.0.0.1:5000`. */
  registry: string;
  /** The repository path in that registry: `library/python`, `nvidia/cuda`. */
  repository: string;
  /** The tag; `latest` when neither a tag nor a digest was written (Docker's default). Null with a digest alone. */
  tag: string | null;
  /** `sha256:<64 hex>` when the reference pins a manifest; it wins over the tag. */
  digest: string | null;
  /** The whole reference, fully qualified: `docker.io/library/python:3.12`, `ghcr.io/a/b@sha256:…`. */
  canonical: string;
}

/** A reference that is malformed, or that the operator does not allow; its message names it and what to do. */
export class ImageReferenceError extends Error {
  override name = "ImageReferenceError";
}

/** Docker Hub: what a reference without a registry means, and the names it is also known by. */
export const DOCKER_HUB = "docker.io";
const DOCKER_HUB_ALIASES = new Set(["docker.io", "index.docker.io", "registry-1.docker.io"]);

const MAX_NAME_LENGTH = 255;
const MAX_REFERENCE_LENGTH = 512;
// The distribution project's grammar (reference/regexp.go), anchored piece by piece.
const DOMAIN_COMPONENT = /^(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])$/;
const PORT = /^[0-9]{1,5}$/;
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const SHA256_DIGEST = /^sha256:[a-f0-9]{64}$/;

/**
 * The registry hosts allowed by default (`RUNPLANE_IMAGE_REGISTRIES` unset): well-known public registries
 * that serve over HTTPS. An operator who wants fewer (or a private mirror) sets the variable.
 */
export const DEFAULT_IMAGE_REGISTRIES: readonly string[] = Object.freeze([
  // Docker Hub: official images (`python`, `debian`, `ubuntu`) and most community images.
  "docker.io",
  // GitHub Container Registry: images published from GitHub repositories.
  "ghcr.io",
  // Red Hat's Quay.io: many open-source projects' images.
  "quay.io",
  // Amazon ECR Public Gallery: AWS's public images and mirrors of Docker Hub's official ones.
  "public.ecr.aws",
  // NVIDIA's NGC catalog: CUDA, cuDNN, PyTorch and Triton images for GPU apps.
  "nvcr.io",
  // The Kubernetes project's registry.
  "registry.k8s.io",
  // Google Container Registry: Google's public images (distroless among them).
  "gcr.io",
  // Microsoft Artifact Registry: Microsoft's images (.NET, Azure tools).
  "mcr.microsoft.com",
]);

/** Options of {@link registryAllowed}. */
export interface RegistryAllowedOptions {
  /** The allowed registry hosts, as written in `RUNPLANE_IMAGE_REGISTRIES` (a port, when given, must match). */
  registries: readonly string[];
}

function refuse(text: string, why: string): never {
  throw new ImageReferenceError(
    `The image reference ${JSON.stringify(text)} is not valid: ${why}; write name:tag or name@sha256:<64 hex digits>`,
  );
}

/** Docker Hub's aliases are one registry; every other host is compared lowercase, port included. */
function normalRegistry(host: string): string {
  const lower = host.toLowerCase();
  return DOCKER_HUB_ALIASES.has(lower) ? DOCKER_HUB : lower;
}

function checkDomain(text: string, domain: string): void {
  const [host, port, ...rest] = domain.split(":");
  if (rest.length || (port !== undefined && !(PORT.test(port) && Number(port) > 0 && Number(port) < 65536))) {
    refuse(text, `${JSON.stringify(domain)} is not a registry host with an optional port`);
  }
  if (!host!.split(".").every((part) => DOMAIN_COMPONENT.test(part))) {
    refuse(text, `${JSON.stringify(domain)} is not a registry host name`);
  }
}

/** Splits `name` into registry and repository: the first component is a registry when it looks like a host. */
function splitName(text: string, name: string): { registry: string; repository: string } {
  const slash = name.indexOf("/");
  const first = slash === -1 ? "" : name.slice(0, slash);
  const hasDomain = first !== "" && (first.includes(".") || first.includes(":") || first === "localhost");
  if (hasDomain) checkDomain(text, first);
  const registry = hasDomain ? normalRegistry(first) : DOCKER_HUB;
  let repository = hasDomain ? name.slice(slash + 1) : name;
  if (repository === "") refuse(text, "the repository name is missing");
  if (!repository.split("/").every((part) => PATH_COMPONENT.test(part))) {
    refuse(text, `${JSON.stringify(repository)} is not a repository name (lowercase letters, digits, . _ - and /)`);
  }
  if (registry === DOCKER_HUB && !repository.includes("/")) repository = `library/${repository}`;
  if (`${registry}/${repository}`.length > MAX_NAME_LENGTH) {
    refuse(text, `the name is longer than ${MAX_NAME_LENGTH} characters`);
  }
  return { registry, repository };
}

/**
 * Parses an image reference (`python:3.12`, `ghcr.io/org/app@sha256:…`, `127.0.0.1:5000/team/base:1`).
 * Throws an {@link ImageReferenceError} naming the reference and the fault when it is malformed: only
 * `sha256` digests are accepted, and a reference without tag or digest means `:latest`.
 */
export function parseImageReference(text: string): ImageReference {
  if (typeof text !== "string" || text === "") refuse(String(text), "it is empty");
  if (text.length > MAX_REFERENCE_LENGTH) refuse(text.slice(0, 40) + "…", "it is too long");
  let rest = text;
  let digest: string | null = null;
  const at = rest.indexOf("@");
  if (at !== -1) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!SHA256_DIGEST.test(digest)) refuse(text, "the digest is not sha256: and 64 lowercase hex digits");
  }
  let tag: string | null = null;
  const colon = rest.lastIndexOf(":");
  if (colon > rest.lastIndexOf("/")) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) refuse(text, `${JSON.stringify(tag)} is not a tag (letters, digits, _ . -, at most 128)`);
  }
  if (tag === null && digest === null) tag = "latest";
  const { registry, repository } = splitName(text, rest);
  const canonical = `${registry}/${repository}${tag === null ? "" : `:${tag}`}${digest === null ? "" : `@${digest}`}`;
  return { registry, repository, tag, digest, canonical };
}

/**
 * Parses an allow-list as `RUNPLANE_IMAGE_REGISTRIES` and `RUNPLANE_INSECURE_REGISTRIES` write it: registry
 * hosts (with a port when the registry has one) separated by commas. Throws naming an entry that is no host.
 */
export function parseRegistryList(text: string): string[] {
  const hosts: string[] = [];
  for (const entry of text.split(",").map((part) => part.trim()).filter(Boolean)) {
    try {
      checkDomain(entry, entry);
    } catch {
      throw new ImageReferenceError(
        `The registry ${JSON.stringify(entry)} is not a registry host: write host names separated by commas, `
          + `each with its port when it has one (docker.io,ghcr.io,127.0.0.1:5000)`,
      );
    }
    hosts.push(normalRegistry(entry));
  }
  return hosts;
}

/** Whether the reference's registry is in the allow-list (hosts compared lowercase, Docker Hub's aliases as one). */
export function registryAllowed(reference: ImageReference, options: RegistryAllowedOptions): boolean {
  return options.registries.some((host) => normalRegistry(host) === reference.registry);
}

/** Throws an {@link ImageReferenceError} naming the reference and its registry unless the registry is allowed. */
export function assertRegistryAllowed(reference: ImageReference, options: RegistryAllowedOptions): void {
  if (registryAllowed(reference, options)) return;
  throw new ImageReferenceError(
    `The image ${reference.canonical} is on the registry ${reference.registry}, which this server does not allow: `
      + `use an image from ${options.registries.join(", ") || "no registry (none is allowed)"}, `
      + `or ask the operator to add ${reference.registry} to RUNPLANE_IMAGE_REGISTRIES`,
  );
}
