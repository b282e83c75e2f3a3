/**
 * The host's image store: images pulled from allowed registries by `skopeo copy` into one OCI layout
 * (content-addressed blobs, shared by every image that has them), and root file systems unpacked by
 * `umoci`, once per image digest, for replicas to use read-only.
 *
 * Layout of `dir`: `oci/` (the OCI layout), `roots/sha256-<hex>/` (finished roots; `.partial-*` beside them
 * are unfinished and never used), `tmp/` (the tools' temporary files), `policy.json` (skopeo's trust policy).
 * One process owns a store (the host's supervisor): pulls and unpacks are queued one at a time within it,
 * so the layout's index is never written by two tools at once.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { isAbsolute, join, resolve } from "node:path";
import type { Logger } from "../log.ts";
import { type ImageConfig, readImageConfig } from "./_image_config.ts";
import { digestHex, isSha256Digest } from "./_oci_blobs.ts";
import { SerialQueue, SingleFlight } from "./_single_flight.ts";
import { digestTag, referenceTag, skopeoPull } from "./_skopeo_pull.ts";
import { rootExists, rootPath, umociUnpack } from "./_umoci_unpack.ts";
import { evictRoot, listRoots, type StoredRoot } from "./_root_eviction.ts";
import { lastUsedMs, touchUsed } from "./_tree_usage.ts";
import { runTool } from "./_run_tool.ts";
import { pushRoot } from "./_skopeo_push.ts";
import {
  assertRegistryAllowed,
  type ImageReference,
  ImageReferenceError,
  parseImageReference,
  registryAllowed,
} from "./image_reference.ts";
import { type ImageTools, missingToolsMessage } from "./image_tools.ts";

/** Options of {@link createImageStore}. */
export interface ImageStoreOptions {
  /** The tools found on this host ({@link findImageTools}); without skopeo and umoci every pull is refused. */
  tools: ImageTools;
  /** The registry hosts images may come from (`RUNPLANE_IMAGE_REGISTRIES`). */
  registries: readonly string[];
  /** The registries reached over plain HTTP or without certificate checks (`RUNPLANE_INSECURE_REGISTRIES`). */
  insecureRegistries?: readonly string[];
  /** A containers auth file (`RUNPLANE_REGISTRY_AUTH_FILE`), used for every pull; pulls are anonymous without one. */
  authFile?: string | null;
  logger: Logger;
  /**
   * The cluster's registry (`RUNPLANE_REGISTRY`: a registry host with an optional path, `10.0.0.5:5000/runplane`),
   * where the host that builds a layer pushes it and the others pull it; null or absent: none.
   */
  sharedRegistry?: string | null;
  /** How long one pull may take; 15 minutes by default (a CUDA image is gigabytes). */
  pullTimeoutMs?: number;
  /** How long one unpack may take; 10 minutes by default. */
  unpackTimeoutMs?: number;
}

/** The store of one host. */
export interface ImageStore {
  /** The store's folder (absolute). */
  readonly dir: string;
  /** The tools found on this host. */
  readonly tools: ImageTools;
  /**
   * Pulls `reference` (a string as `[build] base_image` writes it) and resolves to the manifest digest of
   * the image as the store keeps it. Throws an {@link ImageReferenceError} for a malformed or disallowed
   * reference and an {@link ImageToolsMissingError} on a host without the tools (both the caller's 400s).
   */
  pull(reference: string): Promise<string>;
  /** The root file system of the pulled image `digest`, unpacked on the first call and reused after. */
  unpack(digest: string): Promise<string>;
  /** The run settings of the pulled image `digest` (`ENV`, `CMD`, `ENTRYPOINT`, `WORKDIR`, `EXPOSE`, `USER`). */
  config(digest: string): Promise<ImageConfig>;
  /** The finished roots on this host, with when each was last pulled, unpacked or said used ({@link touch}). */
  roots(): Promise<StoredRoot[]>;
  /** Says the root of `digest` is in use now (a deployment served here runs in it). */
  touch(digest: string): Promise<void>;
  /**
   * Removes the root of `digest` and the image from the layout (its blobs collected) unless it was used at or
   * after `usedBeforeMs` (then false): checked in the store's queue, so no pull or unpack of it races the
   * removal, and an unpack asked meanwhile waits and unpacks it again.
   */
  evict(digest: string, options: { usedBeforeMs: number }): Promise<boolean>;
  /**
   * Why `reference` cannot be deployed here, checked before anything is pulled: a malformed reference, a
   * registry outside the allow-list, or a host without the tools. Null when it may be pulled.
   */
  admissionProblem(reference: string): string | null;
  /**
   * The digest `reference` was last pulled as on this host, read from the store without asking a registry;
   * null when it was never pulled here (or the reference is malformed).
   */
  knownDigest(reference: string): Promise<string | null>;
  /** The cluster's registry where hosts share what they built (`RUNPLANE_REGISTRY`); null without one. */
  readonly sharedRegistry: string | null;
  /**
   * Pushes `root`, a finished root file system no process writes, to the cluster's registry as `name:tag`
   * (one layer). Throws when there is no such registry or the push fails.
   */
  pushShared(root: string, options: { name: string; tag: string }): Promise<void>;
  /**
   * Pulls `name:tag` from the cluster's registry and unpacks it: its root, or null when there is no such
   * registry or it cannot give the image (not pushed yet, unreachable: the caller builds it itself).
   */
  pullShared(options: { name: string; tag: string }): Promise<string | null>;
}

export type { StoredRoot } from "./_root_eviction.ts";

/** A store asked to pull or unpack on a host without skopeo or umoci; the message names what to install. */
export class ImageToolsMissingError extends Error {
  override name = "ImageToolsMissingError";
}

/** Signatures are not checked: images are pinned by digest and come only from the operator's registries. */
const TRUST_POLICY = JSON.stringify({ default: [{ type: "insecureAcceptAnything" }] });

function storeFolder(dir: string): string {
  if (!isAbsolute(dir) || resolve(dir) === "/") {
    throw new Error(`The image store's folder must be an absolute path other than /, not ${JSON.stringify(dir)}`);
  }
  return resolve(dir);
}

/** The tools' environment: the search path and HOME, nothing else of the server's (its secrets stay out). */
function toolEnv(tmp: string): Record<string, string> {
  return { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/", TMPDIR: tmp };
}

function requireTools(tools: ImageTools): { skopeo: string; umoci: string } {
  const missing = missingToolsMessage(tools);
  if (missing) throw new ImageToolsMissingError(missing);
  return { skopeo: tools.paths.skopeo!, umoci: tools.paths.umoci! };
}

/** When each digest was last pulled or unpacked by this process, and the evictions under way. */
interface Usage {
  used: Map<string, number>;
  evicting: Map<string, Promise<boolean>>;
}

/**
 * Evicts the root of `digest` unless it was used at or after `usedBeforeMs`. Marked as under way before
 * its first await, and the use this process knows of checked again just before the removal, so an unpack
 * that began meanwhile either keeps the root or waits for the eviction and unpacks anew.
 */
function evictUnused(
  digest: string,
  options: {
    usedBeforeMs: number;
    usage: Usage;
    umoci: string;
    layout: string;
    roots: string;
    env: Record<string, string>;
  },
): Promise<boolean> {
  const { usage, usedBeforeMs } = options;
  const usedSince = () => (usage.used.get(digest) ?? 0) >= usedBeforeMs;
  if (usedSince() || usage.evicting.has(digest)) return Promise.resolve(false);
  const evicted = (async () => {
    if (await lastUsedMs(rootPath(options.roots, digest)) >= usedBeforeMs || usedSince()) return false;
    await evictRoot(digest, options);
    usage.used.delete(digest);
    return true;
  })().finally(() => usage.evicting.delete(digest));
  usage.evicting.set(digest, evicted.catch(() => false));
  return evicted;
}

/** See `ImageStore.knownDigest`: the digest under the reference's tag in the layout's index. */
async function knownDigest(layout: string, text: string): Promise<string | null> {
  let tag: string;
  try {
    tag = referenceTag(parseImageReference(text));
  } catch {
    return null;
  }
  const index = await readFile(join(layout, "index.json"), "utf8").then(
    (json) => JSON.parse(json) as { manifests?: { digest?: string; annotations?: Record<string, string> }[] },
    () => ({ manifests: [] }),
  );
  const entry = (index.manifests ?? []).find((manifest) =>
    manifest.annotations?.["org.opencontainers.image.ref.name"] === tag
  );
  return entry?.digest && isSha256Digest(entry.digest) ? entry.digest : null;
}

/** What a push to the cluster's registry needs of the store. */
interface PushContext {
  name: string;
  tag: string;
  options: ImageStoreOptions;
  paths: { tmp: string };
  policy: string;
  env: Record<string, string>;
  prepare(): Promise<void>;
}

/** Pushes the finished root `path` to the cluster's registry as `name:tag` (see `ImageStore.pushShared`). */
async function pushShared(path: string, context: PushContext): Promise<void> {
  const { options } = context;
  if (!options.sharedRegistry) throw new Error("There is no cluster registry (RUNPLANE_REGISTRY) to push to");
  const { skopeo, umoci } = requireTools(options.tools);
  await context.prepare();
  const reference = parseImageReference(`${options.sharedRegistry}/${context.name}:${context.tag}`);
  const started = performance.now();
  await pushRoot(path, {
    skopeo,
    umoci,
    tar: "tar",
    tmp: context.paths.tmp,
    policy: context.policy,
    insecure: registryAllowed(reference, { registries: options.insecureRegistries ?? [] }),
    authFile: options.authFile ?? null,
    timeoutMs: options.pullTimeoutMs ?? 15 * 60_000,
    env: context.env,
    reference,
  });
  options.logger.info({ image: reference.canonical, ms: Math.round(performance.now() - started) }, "layer pushed");
}

/**
 * Makes the image store in `dir` (an absolute path; its folders are made on first use). Nothing is pulled
 * until asked; a host without the tools gets a store that refuses, so apps without `base_image` still run.
 */
export function createImageStore(dir: string, options: ImageStoreOptions): ImageStore {
  const root = storeFolder(dir);
  const paths = { layout: join(root, "oci"), roots: join(root, "roots"), tmp: join(root, "tmp") };
  const policy = join(root, "policy.json");
  const env = toolEnv(paths.tmp);
  const queue = new SerialQueue();
  const pulls = new SingleFlight<string>();
  const unpacks = new SingleFlight<string>();
  const usage: Usage = { used: new Map(), evicting: new Map() };
  let prepared: Promise<void> | undefined;
  const prepare = () =>
    prepared ??= (async () => {
      for (const folder of [paths.roots, paths.tmp]) await mkdir(folder, { recursive: true, mode: 0o755 });
      await writeFile(policy, TRUST_POLICY);
    })().catch((error) => {
      prepared = undefined;
      throw error;
    });

  async function pullOnce(reference: ImageReference): Promise<string> {
    const { skopeo, umoci } = requireTools(options.tools);
    await prepare();
    const started = performance.now();
    const insecure = registryAllowed(reference, { registries: options.insecureRegistries ?? [] });
    const timeoutMs = options.pullTimeoutMs ?? 15 * 60_000;
    const digest = await queue.run(async () => {
      const pulled = await skopeoPull(reference, {
        skopeo,
        ...paths,
        policy,
        insecure,
        authFile: options.authFile ?? null,
        timeoutMs,
        env,
      });
      const image = `${paths.layout}:${referenceTag(reference)}`;
      await runTool(umoci, ["tag", "--image", image, digestTag(pulled)], { timeoutMs: 60_000, env, subcommand: "tag" });
      usage.used.set(pulled, Date.now());
      return pulled;
    });
    const ms = Math.round(performance.now() - started);
    options.logger.info({ image: reference.canonical, digest, ms }, "image pulled");
    return digest;
  }

  async function unpackOnce(digest: string): Promise<string> {
    const { umoci } = requireTools(options.tools);
    await prepare();
    if (await rootExists(paths.roots, digest)) return rootPath(paths.roots, digest);
    await readImageConfig(paths.layout, digest); // a clear error for an image that was never pulled
    const started = performance.now();
    const timeoutMs = options.unpackTimeoutMs ?? 10 * 60_000;
    const unpacked = await queue.run(() => umociUnpack(digest, { umoci, ...paths, timeoutMs, env }));
    options.logger.info({ digest, ms: Math.round(performance.now() - started) }, "image unpacked");
    return unpacked;
  }

  const shared = options.sharedRegistry ?? null;
  const sharedReference = (name: string, tag: string) => parseImageReference(`${shared}/${name}:${tag}`);

  return {
    dir: root,
    tools: options.tools,
    sharedRegistry: shared,
    knownDigest: (text) => knownDigest(paths.layout, text),
    pushShared: (path, where) => pushShared(path, { ...where, options, paths, policy, env, prepare }),
    async pullShared(where) {
      if (!shared) return null;
      const reference = sharedReference(where.name, where.tag);
      try {
        const digest = await pulls.run(reference.canonical, () => pullOnce(reference));
        return await unpacks.run(digest, () => unpackOnce(digest));
      } catch (error) {
        options.logger.info({ image: reference.canonical, err: error }, "the cluster registry has no such layer");
        return null;
      }
    },
    async pull(text) {
      const reference = parseImageReference(text);
      assertRegistryAllowed(reference, { registries: options.registries });
      return pulls.run(reference.canonical, () => pullOnce(reference));
    },
    async unpack(digest) {
      digestHex(digest);
      // Said before anything is awaited: an eviction that has not yet decided sees it and keeps the root.
      usage.used.set(digest, Date.now());
      await usage.evicting.get(digest);
      const root = await unpacks.run(digest, () => unpackOnce(digest));
      await touchUsed(root);
      return root;
    },
    roots() {
      return listRoots(paths.roots);
    },
    async touch(digest) {
      usage.used.set(digest, Date.now());
      if (await rootExists(paths.roots, digest)) await touchUsed(rootPath(paths.roots, digest));
    },
    evict(digest, evictOptions) {
      digestHex(digest);
      const { umoci } = requireTools(options.tools);
      return queue.run(() => evictUnused(digest, { ...evictOptions, usage, umoci, ...paths, env }));
    },
    async config(digest) {
      digestHex(digest);
      return readImageConfig(paths.layout, digest);
    },
    admissionProblem(text) {
      try {
        assertRegistryAllowed(parseImageReference(text), { registries: options.registries });
      } catch (error) {
        if (error instanceof ImageReferenceError) return error.message;
        throw error;
      }
      return missingToolsMessage(options.tools);
    },
  };
}
