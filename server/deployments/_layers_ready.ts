/**
 * What `createBaseImageHash` answers: whether a build of a base-image request on this host would build
 * nothing — every layer it needs is here. On the host's system that is the shared virtualenv of the digest;
 * with a base image, also the image (pulled here before, under that reference), its system layer when the
 * request has apt or conda packages, and the virtualenv made in it. Nothing is pulled or built to find out.
 */
import type { BaseImageRequest } from "../builds/mod.ts";
import type { ImageStore } from "../images/mod.ts";
import { DEFAULT_PYTHON, dependencyLayer, layerReady, sharedLayerReady, venvsDir } from "./_dependency_layer.ts";
import { systemLayer, systemLayerReady, systemLayersDir } from "./_system_layer.ts";

/** Options of {@link buildLayersReady}. */
export interface LayersReadyOptions {
  /** The request's base-image digest (`sha256:<hex>`). */
  digest: string;
  dataDir: string;
  /** This host's images; without a store no image is ever here. */
  images?: ImageStore;
}

/** Whether every layer a build of `request` needs is ready on this host (see the module's comment). */
export async function buildLayersReady(request: BaseImageRequest, options: LayersReadyOptions): Promise<boolean> {
  const pip = request.pipRequirements ?? [];
  const reference = request.baseImageUri;
  if (reference === undefined) {
    return pip.length === 0 || await sharedLayerReady(venvsDir(options.dataDir), options.digest);
  }
  const imageDigest = await options.images?.knownDigest(reference);
  if (!imageDigest) return false;
  const system = systemLayer(imageDigest, {
    apt: request.aptPackages ?? [],
    conda: request.condaPackages ?? [],
    layersDir: systemLayersDir(options.dataDir),
  });
  if (system && !(await systemLayerReady(system))) return false;
  if (pip.length === 0) return true;
  // The shared virtualenv of the default interpreter in that root, as a deployment's build names it (a
  // bundle-scoped one is never reused, so it is never "cached").
  const layer = dependencyLayer({ digest: options.digest, pipSeesBundle: false }, {
    venvsDir: venvsDir(options.dataDir),
    python: DEFAULT_PYTHON,
    deploymentDir: "/nonexistent",
    projectId: "",
    bundleDigest: "",
    imageDigest: system ? `sha256:${system.key}` : imageDigest,
  });
  return await layerReady(layer.dir);
}
