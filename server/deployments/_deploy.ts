/**
 * Deploying: an uploaded bundle or a repository's folder, checked, stored as a new deployment of the app
 * (made if new) and queued for a build, which every process is woken to claim.
 */
import { ProblemError } from "../problems/mod.ts";
import { timeOrderedId } from "../random/mod.ts";
import { refuseDirectoryApp } from "./_app_changes.ts";
import { checkBundle } from "./_bundle_check.ts";
import { bundleDigest } from "./_bundle_extract.ts";
import { fileChunks } from "./_bundle_files.ts";
import { deploymentView } from "./_deployment_views.ts";
import { BUNDLE_CHUNK_BYTES, type BundleSource, insertDeployment } from "./_records.ts";
import type { DeploymentsContext } from "./_serving.ts";
import type { AppRef, BundleFile, DeploymentLabel, DeploymentView, RepositorySource } from "./_types.ts";

/** A spooled upload: read a chunk at a time into one buffer (to check it, and to store it in rows), or linked. */
function fileSource(file: BundleFile): BundleSource {
  return { digest: file.digest, size: file.size, chunks: () => fileChunks(file.path), path: file.path };
}

/** A bundle in memory (a repository's archive), cut into chunks without copying. */
function bytesSource(bytes: Uint8Array): BundleSource {
  async function* chunks(): AsyncGenerator<Uint8Array> {
    for (let at = 0; at < bytes.byteLength; at += BUNDLE_CHUNK_BYTES) {
      yield bytes.subarray(at, at + BUNDLE_CHUNK_BYTES);
    }
  }
  return { digest: bundleDigest(bytes), size: bytes.byteLength, chunks };
}

/** `dirty` says something of `commit` only: without one it is refused (400). */
function checkLabel(label: DeploymentLabel): void {
  if (label.dirty !== undefined && label.commit === undefined) {
    throw new ProblemError("validation", "query.dirty says whether the folder matched query.commit; send both", {
      errors: [{ path: "query.dirty", message: "needs query.commit" }],
    });
  }
}

/** Checks `bundle`, stores it as a queued deployment of `ref` and wakes the builders. */
async function storeDeployment(
  context: DeploymentsContext,
  deployment: {
    ref: AppRef;
    bundle: BundleSource;
    label: DeploymentLabel;
    repository?: DeploymentView["repository"];
  },
): Promise<DeploymentView> {
  const { options, serving } = context;
  const { ref, bundle, label, repository } = deployment;
  refuseDirectoryApp(options.runtime, ref);
  const dropUnpacked = await checkBundle(ref, { settings: options.settings, runtime: options.runtime, bundle });
  const row = await insertDeployment(options.db, {
    deploymentId: timeOrderedId("dep_"),
    projectId: ref.projectId,
    appId: ref.appId,
    bundle,
    source: repository ? "repository" : "bundle",
    repository: repository ?? undefined,
    message: label.message,
    commit: repository?.commit ?? label.commit,
    dirty: repository ? false : label.dirty === true,
    now: options.now(),
  }, { bundleDir: options.settings.bundleDir }).catch(async (error: unknown) => {
    await dropUnpacked();
    throw error;
  });
  options.logger.info({ deployment_id: row.deployment_id, app: `${ref.projectId}/${ref.appId}` }, "deployment queued");
  serving.wakeBuilder();
  await serving.announce();
  return deploymentView(row, null);
}

/** Deploys an uploaded bundle (see `Deployments.deployBundle`). */
export function deployBundle(
  context: DeploymentsContext,
  upload: { ref: AppRef; bundle: BundleFile; label: DeploymentLabel },
): Promise<DeploymentView> {
  checkLabel(upload.label);
  return storeDeployment(context, { ref: upload.ref, bundle: fileSource(upload.bundle), label: upload.label });
}

/** Fetches a repository folder and deploys it like a bundle (see `Deployments.deployRepository`). */
export async function deployRepository(
  context: DeploymentsContext,
  request: { ref: AppRef; source: RepositorySource; label: DeploymentLabel },
): Promise<DeploymentView> {
  const { options } = context;
  const { ref, source, label } = request;
  checkLabel(label);
  if (label.commit !== undefined) {
    throw new ProblemError(
      "validation",
      "A repository deployment's commit is the one its ref resolves to; leave query.commit out (or name it as source.ref)",
      { errors: [{ path: "query.commit", message: "must be absent when deploying from a repository" }] },
    );
  }
  refuseDirectoryApp(options.runtime, ref);
  const archive = await options.archiveRepository(ref.projectId, {
    ...source,
    maxBytes: options.settings.bundleLimitBytes,
  });
  return storeDeployment(context, {
    ref,
    bundle: bytesSource(archive.bytes),
    label,
    repository: {
      owner: source.owner,
      repo: source.repo,
      ref: archive.ref,
      commit: archive.commit,
      path: source.path ?? "",
    },
  });
}
