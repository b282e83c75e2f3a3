/**
 * `RUNPLANE_GPUS`: the GPUs Runplane may give replicas, as a comma-separated list of indexes or UUIDs,
 * each optionally followed by `:` and its model (for GPUs nvidia-smi does not list: a fake inventory).
 */
import { GPU_MODEL, GPU_UUID } from "./_gpu.ts";

/** One entry of `RUNPLANE_GPUS`. */
export interface GpuEntry {
  /** Set when the entry is an index. */
  index?: number;
  /** Set when the entry is a UUID. */
  uuid?: string;
  /** The model after `:`, used where nvidia-smi does not list the GPU. */
  model?: string;
}

/**
 * Parses `RUNPLANE_GPUS`: `""` is null (ask nvidia-smi), `none` an empty list, else each entry is
 * `<index>` or `GPU-<uuid>`, then optionally `:<model>`. Throws an `Error` naming the first bad entry.
 */
export function parseGpuList(raw: string): GpuEntry[] | null {
  const text = raw.trim();
  if (text === "") return null;
  if (text.toLowerCase() === "none") return [];
  const entries: GpuEntry[] = [];
  const seen = new Set<string>();
  for (const part of text.split(",")) {
    const item = part.trim();
    const colon = item.indexOf(":");
    const id = (colon < 0 ? item : item.slice(0, colon)).trim();
    const model = colon < 0 ? undefined : item.slice(colon + 1).trim();
    if (model !== undefined && !GPU_MODEL.test(model)) {
      throw new Error(
        `entry ${JSON.stringify(item)} has no model after ":" (or one with characters other than printable ASCII)`,
      );
    }
    let entry: GpuEntry;
    if (/^\d{1,4}$/.test(id)) entry = { index: Number(id) };
    else if (GPU_UUID.test(id)) entry = { uuid: id };
    else {
      throw new Error(
        `entry ${
          JSON.stringify(item)
        } is neither a GPU index (0, 1, …) nor a UUID (GPU-…); list them as nvidia-smi -L shows them, separated by commas, or set none`,
      );
    }
    const key = (entry.uuid ?? String(entry.index)).toLowerCase();
    if (seen.has(key)) throw new Error(`GPU ${id} is listed twice`);
    seen.add(key);
    entries.push(model === undefined ? entry : { ...entry, model });
  }
  return entries;
}
