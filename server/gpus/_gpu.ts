/** One GPU of this host, as the inventory knows it. */
export interface Gpu {
  /** How `CUDA_VISIBLE_DEVICES` names it: its UUID, or its index where only that is known. */
  id: string;
  /** nvidia-smi's index (PCI bus order); null when unknown. */
  index: number | null;
  /** `GPU-…`; null when unknown (a `RUNPLANE_GPUS` entry given as an index that nvidia-smi does not list). */
  uuid: string | null;
  /** The model as nvidia-smi names it (`NVIDIA H100 80GB HBM3`); null when unknown. */
  model: string | null;
  /** Its memory in MiB; null when unknown. */
  memoryMiB: number | null;
  /** The minor number of its device node, `/dev/nvidia<minor>`; null when unknown (no node is bound for it). */
  minor: number | null;
}

/** The host's GPUs, where the list came from, and what was wrong with it. */
export interface GpuInventory {
  gpus: Gpu[];
  /** `nvidia-smi`, `RUNPLANE_GPUS` (a fixed or fake list), or `none` (no nvidia-smi here). */
  source: "nvidia-smi" | "RUNPLANE_GPUS" | "none";
  /** Lines skipped, GPUs without a device node, a failing nvidia-smi: each with what to do. */
  problems: string[];
}

/** A GPU's UUID as nvidia-smi prints it (and as `RUNPLANE_GPUS` may name a fake one). */
export const GPU_UUID = /^GPU-[A-Za-z0-9][A-Za-z0-9-]{0,79}$/;

/** A GPU model name: printable ASCII, at most 96 characters. */
export const GPU_MODEL = /^[\x20-\x7e]{1,96}$/;
