/**
 * GPUs: the host's inventory (nvidia-smi, or `RUNPLANE_GPUS`), which models satisfy `[hardware] compute`,
 * and the device nodes and driver files (libraries, `nvidia-smi`) a replica holding some needs. Knows
 * nothing of apps or replicas: the runtime's host budget gives GPUs out, and the sandbox binds them.
 */
export { type DeviceBind, gpuDeviceNodes } from "./_device_nodes.ts";
export {
  DRIVER_LIBRARIES,
  type DriverFile,
  type DriverFiles,
  type DriverFilesOptions,
  findDriverFiles,
  parseLdconfig,
  VERSIONED_DRIVER_LIBRARIES,
} from "./_driver_files.ts";
export type { Gpu, GpuInventory } from "./_gpu.ts";
export { type GpuEntry, parseGpuList } from "./_gpu_list.ts";
export { gpuMatchesCompute } from "./_gpu_models.ts";
export { detectGpus, type DetectGpusOptions } from "./_inventory.ts";
export { NVIDIA_SMI_ARGS, parseNvidiaSmiCsv, procFolder, type SmiGpu } from "./_nvidia_smi.ts";
