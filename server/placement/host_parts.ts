/**
 * What a server process is given of its host before anything runs: the sandbox tenants' code runs in,
 * the cgroups that bound its replicas, and the GPUs they may hold. A host's worker (`RUNPLANE_WORKERS`
 * > 1) starts no replica: it shows the supervisor's cgroups and GPUs as the supervisor found them, and
 * keeps a sandbox of its own only so that nothing it might ever build runs unjailed.
 */
import { join } from "node:path";
import { ConfigError } from "../config.ts";
import type { Config } from "../config.ts";
import { detectGpus, type GpuInventory } from "../gpus/mod.ts";
import type { Logger } from "../log.ts";
import type { HostRole } from "../host/mod.ts";
import { createImageStore, findImageTools, type ImageStore, missingToolsMessage } from "../images/mod.ts";
import { deploymentsRefused, refusalReason } from "./deployment_gate.ts";
import {
  type Cgroups,
  CgroupsUnavailableError,
  createCgroups,
  createSandbox,
  disabledCgroups,
  type Sandbox,
  SandboxUnavailableError,
} from "../sandbox/mod.ts";

/** The sandbox, cgroups, GPUs and image store of this process. */
export interface HostParts {
  sandbox: Sandbox;
  cgroups: Cgroups;
  gpus: GpuInventory;
  /** Images of `[build] base_image`, in `<data dir>/images`; it refuses every pull on a host without the tools. */
  images: ImageStore;
}

/** The host's image store, with the tools found here and the operator's registries. */
async function hostImages(config: Config, logger: Logger): Promise<ImageStore> {
  const tools = await findImageTools();
  return createImageStore(join(config.dataDir, "images"), {
    tools,
    registries: config.imageRegistries,
    insecureRegistries: config.insecureRegistries,
    authFile: config.registryAuthFile,
    sharedRegistry: config.sharedRegistry,
    logger,
  });
}

/**
 * Makes this process's host parts, logging (the supervisor, or a lone process) what they are and what
 * is wrong. Throws a `ConfigError` when a required part is missing.
 */
export async function hostParts(
  config: Config,
  options: { logger: Logger; owner: string; role?: HostRole; gpuPaths?: { driver?: string } },
): Promise<HostParts> {
  const { logger, role } = options;
  let sandbox: Sandbox;
  try {
    sandbox = await createSandbox(config.sandbox, { logger });
  } catch (error) {
    if (error instanceof SandboxUnavailableError) throw new ConfigError([error.message]);
    throw error;
  }
  const images = await hostImages(config, logger);
  if (role?.kind === "worker") {
    return { sandbox, cgroups: disabledCgroups(role.facts.cgroups), gpus: role.facts.gpus, images };
  }
  logSandbox(logger, { sandbox, setting: config.sandbox });
  let cgroups: Cgroups;
  try {
    cgroups = await createCgroups(config.cgroups, { logger, owner: options.owner, pids: config.replicaPids });
  } catch (error) {
    sandbox.close();
    if (error instanceof CgroupsUnavailableError) throw new ConfigError([error.message]);
    throw error;
  }
  logCgroups(logger, cgroups);
  const gpus = await detectGpus({ list: config.gpus, nvidiaSmi: config.nvidiaSmi, procDir: options.gpuPaths?.driver });
  logGpus(logger, gpus);
  const imagesMissing = missingToolsMessage(images.tools);
  if (imagesMissing) logger.info({ images: "off" }, `images: ${imagesMissing}`);
  return { sandbox, cgroups, gpus, images };
}

function logSandbox(logger: Logger, options: { sandbox: Sandbox; setting: Config["sandbox"] }): void {
  const { status } = options.sandbox;
  if (status.jailed) {
    logger.info(
      { sandbox: status.identity, warnings: status.problems },
      `sandbox: tenants' code runs jailed by bubblewrap (${
        status.identity === "root" ? "each project as a uid of its own" : "in user namespaces"
      })`,
    );
  }
  for (const problem of status.problems) logger.warn({ sandbox: options.setting }, `SANDBOX: ${problem}`);
  if (deploymentsRefused(status)) {
    logger.error(
      { sandbox: options.setting },
      `SANDBOX: ${refusalReason(status)}; deployments already in the store are neither built nor served here`,
    );
  }
}

/** Says at start how replicas are limited: the cgroup version and where, or loudly why they are not. */
function logCgroups(logger: Logger, cgroups: Cgroups): void {
  const { status } = cgroups;
  if (status.version) {
    logger.info(
      { cgroups: status.version, parents: status.parents, replica_pids: status.pids },
      `cgroups: each replica is limited by a cgroup ${status.version} of its own (its [hardware] memory, swap included, and CPU; ${status.pids} processes)`,
    );
  }
  for (const problem of status.problems) logger.warn({ cgroups: status.setting }, `CGROUPS: ${problem}`);
}

function logGpus(logger: Logger, inventory: GpuInventory): void {
  const { gpus, source } = inventory;
  if (gpus.length) {
    logger.info(
      { gpus: gpus.map((gpu) => ({ id: gpu.id, index: gpu.index, model: gpu.model, minor: gpu.minor })), source },
      `GPUs: ${gpus.length} from ${source}, each given whole to one replica at a time`,
    );
  }
  for (const problem of inventory.problems) logger.warn({ gpus: source }, `GPUS: ${problem}`);
}
