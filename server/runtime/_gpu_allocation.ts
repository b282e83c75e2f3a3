/**
 * Which of the host's GPUs each replica holds: a GPU is given to one replica at a time, whole, and taken
 * back when the replica's process is gone. The host budget consults it with every reservation.
 */
import { type Gpu, gpuMatchesCompute } from "../gpus/mod.ts";

/** What one replica asks for: `gpu_count` GPUs, each of the model `compute` names when it names one. */
export interface GpuNeed {
  count: number;
  compute?: string;
}

/** Distinct models with how many GPUs of each: `2 × NVIDIA H100 80GB HBM3, 1 × (model unknown)`. */
function describeModels(gpus: readonly Gpu[]): string {
  const counts = new Map<string, number>();
  for (const gpu of gpus) {
    counts.set(gpu.model ?? "(model unknown)", (counts.get(gpu.model ?? "(model unknown)") ?? 0) + 1);
  }
  return [...counts].map(([model, count]) => `${count} × ${model}`).join(", ");
}

/** The host's GPUs and who holds them. */
export class GpuAllocation {
  readonly gpus: readonly Gpu[];
  readonly #held = new Set<string>();

  constructor(gpus: readonly Gpu[]) {
    this.gpus = gpus;
  }

  /** How many GPUs are held now. */
  get held(): number {
    return this.#held.size;
  }

  /** Why a replica needing `need` could never get its GPUs here (the host has too few of them); undefined if it could. */
  neverFits(need: GpuNeed): string | undefined {
    if (need.count === 0) return undefined;
    if (this.gpus.length === 0) {
      return `[hardware] gpu_count = ${need.count}, but this host has no GPUs (nvidia-smi lists none, or RUNPLANE_GPUS=none): no replica of it could ever start here; deploy it to a host with GPUs`;
    }
    const matching = this.gpus.filter((gpu) => gpuMatchesCompute(need.compute, gpu.model));
    if (matching.length === 0) {
      return `[hardware] compute = ${JSON.stringify(need.compute)} matches none of this host's GPUs (${
        describeModels(this.gpus)
      }): no replica of it could ever start here; name one of these models, or deploy it to a host with that one`;
    }
    if (need.count > matching.length) {
      const of = need.compute === undefined ? "" : ` matching compute = ${JSON.stringify(need.compute)}`;
      return `[hardware] gpu_count = ${need.count} is more than this host's ${matching.length} GPUs${of} (${
        describeModels(matching)
      }): no replica of it could ever start here; lower it`;
    }
    return undefined;
  }

  /** `need.count` free GPUs of the model, lowest index first, now held; null when too few are free. */
  take(need: GpuNeed): Gpu[] | null {
    if (need.count === 0) return [];
    const free = this.#free(need);
    if (free.length < need.count) return null;
    const taken = free.slice(0, need.count);
    for (const gpu of taken) this.#held.add(gpu.id);
    return taken;
  }

  /** Gives `gpus` back. */
  give(gpus: readonly Gpu[]): void {
    for (const gpu of gpus) this.#held.delete(gpu.id);
  }

  /** Whether too few GPUs for `need` are free now. */
  short(need: GpuNeed): boolean {
    return need.count > 0 && this.#free(need).length < need.count;
  }

  /** Whether giving `held` back would bring `need` a GPU it can use. */
  helps(held: readonly Gpu[], need: GpuNeed): boolean {
    return held.some((gpu) => gpuMatchesCompute(need.compute, gpu.model));
  }

  #free(need: GpuNeed): Gpu[] {
    return this.gpus.filter((gpu) => !this.#held.has(gpu.id) && gpuMatchesCompute(need.compute, gpu.model));
  }
}
