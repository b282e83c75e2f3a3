/**
 * Images: OCI image references and the registries allowed to serve them, the tools images are made with
 * (Debian's skopeo and umoci), and the host's store of pulled images and their unpacked root file systems.
 * Knows nothing of apps, builds or replicas: the builder and the runtime ask it for an image's root and
 * settings.
 */
export { type ImageConfig, imageEnvironment } from "./_image_config.ts";
export { ImageToolError } from "./_run_tool.ts";
export { lastUsedMs, touchUsed, treeBytes, usedStamp } from "./_tree_usage.ts";
export {
  assertRegistryAllowed,
  DEFAULT_IMAGE_REGISTRIES,
  DOCKER_HUB,
  type ImageReference,
  ImageReferenceError,
  parseImageReference,
  parseRegistryList,
  registryAllowed,
  type RegistryAllowedOptions,
} from "./image_reference.ts";
export {
  createImageStore,
  type ImageStore,
  type ImageStoreOptions,
  ImageToolsMissingError,
  type StoredRoot,
} from "./image_store.ts";
export {
  findImageTools,
  type FindImageToolsOptions,
  IMAGE_TOOL_NAMES,
  type ImageToolName,
  type ImageTools,
  missingToolsMessage,
  REQUIRED_IMAGE_TOOLS,
} from "./image_tools.ts";
