/**
 * The device nodes a replica needs for its GPUs: each one's `/dev/nvidia<minor>`, and the driver's shared
 * nodes (`nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`), those that exist. Read at each replica's start:
 * `nvidia-uvm` appears only once the driver's module is loaded, often by the first CUDA program.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import type { Gpu } from "./_gpu.ts";

/** Nodes every GPU replica shares: the control device and unified memory. */
const SHARED_NODES = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"];

/** A host device node and where the sandbox shows it. */
export interface DeviceBind {
  source: string;
  target: string;
}

/**
 * The nodes to bind for `gpus` that exist in `dir` (default `/dev`; tests point it at a folder of fake
 * ones), each shown at `/dev/<name>`; none when `gpus` is empty.
 */
export function gpuDeviceNodes(gpus: readonly Gpu[], options: { dir?: string } = {}): DeviceBind[] {
  if (gpus.length === 0) return [];
  const dir = options.dir ?? "/dev";
  const names = [
    ...gpus.flatMap((gpu) => (gpu.minor === null ? [] : [`nvidia${gpu.minor}`])),
    ...SHARED_NODES,
  ];
  return names.filter((name) => existsSync(join(dir, name))).map((name) => ({
    source: join(dir, name),
    target: `/dev/${name}`,
  }));
}
