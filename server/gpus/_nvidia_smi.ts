/**
 * The host's GPUs as nvidia-smi lists them (`--query-gpu=index,uuid,name,memory.total,pci.bus_id
 * --format=csv`), with each one's device minor read from the driver's `/proc/driver/nvidia/gpus/<bus
 * id>/information` (`Device Minor:`): the minor names its node, `/dev/nvidia<minor>`, which is not
 * always its index (a container given some of a host's GPUs lists them from 0).
 */
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { type Gpu, GPU_MODEL, GPU_UUID } from "./_gpu.ts";

/** The arguments nvidia-smi is run with. */
export const NVIDIA_SMI_ARGS = ["--query-gpu=index,uuid,name,memory.total,pci.bus_id", "--format=csv"];

/** One GPU line of nvidia-smi's CSV. */
export interface SmiGpu {
  index: number;
  uuid: string;
  model: string;
  memoryMiB: number | null;
  /** `00000000:18:00.0`; null when nvidia-smi gave none. */
  busId: string | null;
}

const REQUIRED = ["index", "uuid", "name", "memory.total [MiB]"];
const BUS_ID = /^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$/;

/**
 * Parses nvidia-smi's CSV (its header line names the columns, in any order). A malformed GPU line is
 * skipped with a problem naming it; a missing or foreign header throws.
 */
export function parseNvidiaSmiCsv(text: string): { gpus: SmiGpu[]; problems: string[] } {
  const lines = text.split(/\r?\n/).map((line) => line.trim()).filter((line) => line !== "");
  const header = (lines.shift() ?? "").split(",").map((column) => column.trim());
  const missing = REQUIRED.filter((column) => !header.includes(column));
  if (missing.length) {
    throw new Error(
      `nvidia-smi's CSV has no column ${missing.join(", ")} (its header: ${JSON.stringify(header.join(", "))})`,
    );
  }
  const at = (name: string) => header.indexOf(name);
  const gpus: SmiGpu[] = [];
  const problems: string[] = [];
  for (const line of lines) {
    const cells = line.split(",").map((cell) => cell.trim());
    const gpu = cells.length === header.length ? smiGpu(cells, at) : "it has another number of columns than the header";
    if (typeof gpu === "string") {
      problems.push(`nvidia-smi line ${JSON.stringify(line.slice(0, 200))} is skipped: ${gpu}`);
      continue;
    }
    if (gpus.some((other) => other.index === gpu.index || other.uuid === gpu.uuid)) {
      problems.push(
        `nvidia-smi line ${JSON.stringify(line.slice(0, 200))} is skipped: its index or UUID was listed before`,
      );
      continue;
    }
    gpus.push(gpu);
  }
  return { gpus, problems };
}

/** One line's GPU, or why it is malformed. */
function smiGpu(cells: string[], at: (name: string) => number): SmiGpu | string {
  const [index, uuid, model, memory] = REQUIRED.map((name) => cells[at(name)]);
  if (!/^\d{1,4}$/.test(index)) return `its index ${JSON.stringify(index)} is not a whole number`;
  if (!GPU_UUID.test(uuid)) return `its UUID ${JSON.stringify(uuid)} is not GPU-…`;
  if (!GPU_MODEL.test(model)) return "its name is empty or not printable ASCII";
  const mib = /^(\d+)(?: MiB)?$/.exec(memory);
  const busId = at("pci.bus_id") >= 0 ? cells[at("pci.bus_id")] : "";
  return {
    index: Number(index),
    uuid,
    model,
    memoryMiB: mib ? Number(mib[1]) : null,
    busId: BUS_ID.test(busId) ? busId : null,
  };
}

/** The folder name the driver gives a GPU under `/proc/driver/nvidia/gpus`: `0000:18:00.0`. */
export function procFolder(busId: string): string {
  const [domain, rest] = [busId.slice(0, busId.indexOf(":")), busId.slice(busId.indexOf(":") + 1)];
  return `${domain.slice(-4)}:${rest}`.toLowerCase();
}

/** The `Device Minor` of the GPU at `busId`, from the driver's information file; null when unreadable. */
export async function deviceMinor(busId: string, procDir: string): Promise<number | null> {
  const text = await readFile(join(procDir, procFolder(busId), "information"), "utf8").catch(() => "");
  const match = /^Device Minor:\s*(\d+)\s*$/m.exec(text);
  return match ? Number(match[1]) : null;
}

/** What running nvidia-smi gave: its GPUs, or that it is not here, or why it failed. */
export type SmiResult = { gpus: SmiGpu[]; problems: string[] } | { absent: true } | { failed: string };

/** Runs `command` (nvidia-smi) for the GPU list; never throws. */
export function runNvidiaSmi(command: string, options: { timeoutMs: number }): Promise<SmiResult> {
  return new Promise((resolve) => {
    execFile(command, NVIDIA_SMI_ARGS, { timeout: options.timeoutMs, maxBuffer: 1024 * 1024 }, (error, stdout) => {
      if ((error as NodeJS.ErrnoException | null)?.code === "ENOENT") return resolve({ absent: true });
      if (error) {
        const said = String(stdout).trim().split("\n")[0] || error.message.split("\n")[0];
        return resolve({ failed: `${command} failed (${said.slice(0, 300)})` });
      }
      try {
        resolve(parseNvidiaSmiCsv(String(stdout)));
      } catch (parseError) {
        resolve({ failed: (parseError as Error).message });
      }
    });
  });
}

/** nvidia-smi's GPUs with their device minors (the index where the driver's file does not say, with a problem). */
export async function smiInventory(
  found: SmiGpu[],
  options: { procDir: string },
): Promise<{ gpus: Gpu[]; problems: string[] }> {
  const minors = await Promise.all(found.map((gpu) => gpu.busId ? deviceMinor(gpu.busId, options.procDir) : null));
  // In nvidia-smi's order, problems too (the reads above end in any order).
  const problems = found.flatMap((gpu, at) =>
    minors[at] === null
      ? [
        `GPU ${gpu.index} (${gpu.uuid}): its device minor could not be read from ${options.procDir}; /dev/nvidia${gpu.index} is assumed`,
      ]
      : []
  );
  const gpus = found.map((gpu, at): Gpu => ({
    id: gpu.uuid,
    index: gpu.index,
    uuid: gpu.uuid,
    model: gpu.model,
    memoryMiB: gpu.memoryMiB,
    minor: minors[at] ?? gpu.index,
  }));
  return { gpus, problems };
}
