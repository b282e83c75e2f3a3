/**
 * The host's GPU inventory, read once at start: nvidia-smi's list, or `RUNPLANE_GPUS` — the GPUs it
 * names, each taken from nvidia-smi's list where nvidia-smi lists it, else as given (a fake inventory,
 * which tests use: no device node, the model given after `:`).
 */
import type { GpuEntry } from "./_gpu_list.ts";
import type { Gpu, GpuInventory } from "./_gpu.ts";
import { runNvidiaSmi, type SmiGpu, smiInventory } from "./_nvidia_smi.ts";

/** Options of `detectGpus`. */
export interface DetectGpusOptions {
  /** `RUNPLANE_GPUS` parsed: null takes nvidia-smi's list as it is; an empty list is no GPU (nvidia-smi is not run). */
  list: GpuEntry[] | null;
  /** The nvidia-smi to run (`RUNPLANE_NVIDIA_SMI`). */
  nvidiaSmi: string;
  /** Where the driver's per-GPU folders are; default `/proc/driver/nvidia/gpus`. */
  procDir?: string;
  /** How long nvidia-smi may take; default 20 s. */
  timeoutMs?: number;
}

/** Reads the host's GPUs; never throws (what went wrong is in `problems`, and the GPUs it concerns are left out). */
export async function detectGpus(options: DetectGpusOptions): Promise<GpuInventory> {
  const { list } = options;
  if (list?.length === 0) return { gpus: [], source: "RUNPLANE_GPUS", problems: [] };
  const smi = await runNvidiaSmi(options.nvidiaSmi, { timeoutMs: options.timeoutMs ?? 20_000 });
  const problems: string[] = [];
  let listed: SmiGpu[] = [];
  if ("failed" in smi) problems.push(`${smi.failed}: ${list ? "RUNPLANE_GPUS is taken as given" : "no GPU is used"}`);
  else if ("gpus" in smi) {
    listed = smi.gpus;
    problems.push(...smi.problems);
  }
  const procDir = options.procDir ?? "/proc/driver/nvidia/gpus";
  if (!list) {
    const found = await smiInventory(listed, { procDir });
    return {
      gpus: found.gpus,
      source: "absent" in smi ? "none" : "nvidia-smi",
      problems: [...problems, ...found.problems],
    };
  }
  const gpus: Gpu[] = [];
  for (const entry of list) {
    const real = listed.find((gpu) =>
      entry.uuid ? gpu.uuid.toLowerCase() === entry.uuid.toLowerCase() : gpu.index === entry.index
    );
    if (real) {
      const found = await smiInventory([real], { procDir });
      problems.push(...found.problems);
      gpus.push(...found.gpus);
      continue;
    }
    if ("gpus" in smi) {
      problems.push(
        `RUNPLANE_GPUS names GPU ${entry.uuid ?? entry.index}, which nvidia-smi does not list: it is used as given`,
      );
    }
    const index = entry.index ?? null;
    gpus.push({
      id: entry.uuid ?? String(index),
      index,
      uuid: entry.uuid ?? null,
      model: entry.model ?? null,
      memoryMiB: null,
      minor: index,
    });
  }
  // One GPU named twice (by its index and by its UUID) would be given to two replicas at once.
  const unique = gpus.filter((gpu, at) => gpus.findIndex((other) => other.id === gpu.id) === at);
  if (unique.length < gpus.length) {
    problems.push("RUNPLANE_GPUS names one GPU twice (by index and by UUID): it is used once");
  }
  return { gpus: unique, source: "RUNPLANE_GPUS", problems };
}
