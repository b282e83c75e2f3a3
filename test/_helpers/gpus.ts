/**
 * A fake GPU host for tests: an `nvidia-smi` script that answers the query Runplane sends with a CSV in
 * nvidia-smi's own format (and refuses any other), and a fake driver folder (`/proc/driver/nvidia/gpus`)
 * and device folder (`/dev`), so that nothing of the machine's own is read or touched.
 */
import { execFileSync } from "node:child_process";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NVIDIA_SMI_ARGS } from "../../server/gpus/mod.ts";

/** One GPU of a fake host. */
export interface FakeGpu {
  index: number;
  uuid: string;
  model: string;
  memoryMiB: number;
  busId: string;
  /** Its device minor (in the fake driver folder and device folder); none: neither has it. */
  minor?: number;
}

/** nvidia-smi's CSV for `gpus`, as `--format=csv` prints it (header, units, ", " between cells). */
export function nvidiaSmiCsv(gpus: FakeGpu[]): string {
  const lines = gpus.map((g) => `${g.index}, ${g.uuid}, ${g.model}, ${g.memoryMiB} MiB, ${g.busId}`);
  return ["index, uuid, name, memory.total [MiB], pci.bus_id", ...lines].join("\n") + "\n";
}

/** A fake GPU host's folders; `remove()` when done. */
export interface FakeGpuHost {
  /** The fake nvidia-smi (set RUNPLANE_NVIDIA_SMI to it). */
  nvidiaSmi: string;
  /** The fake `/proc/driver/nvidia/gpus`. */
  driverDir: string;
  /** The fake `/dev`: `nvidia<minor>` for each GPU with a minor, `nvidiactl` and `nvidia-uvm`. */
  deviceDir: string;
  remove(): Promise<void>;
}

/**
 * Makes a fake GPU host. `output` replaces the CSV (malformed lines), `exitCode` makes nvidia-smi fail
 * as it does without a driver (printing its message on stdout, as the real one does).
 */
export async function fakeGpuHost(
  gpus: FakeGpu[],
  options: { output?: string; exitCode?: number } = {},
): Promise<FakeGpuHost> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-gpus-"));
  const nvidiaSmi = join(dir, "nvidia-smi");
  const driverDir = join(dir, "driver");
  const deviceDir = join(dir, "dev");
  await mkdir(deviceDir, { recursive: true });
  await writeFile(join(dir, "answer.csv"), options.output ?? nvidiaSmiCsv(gpus));
  const expected = NVIDIA_SMI_ARGS.join(" ");
  await writeFile(
    nvidiaSmi,
    `#!/bin/sh\nif [ "$*" != "${expected}" ]; then echo "unexpected arguments: $*" >&2; exit 2; fi\n`
      + `cat "${join(dir, "answer.csv")}"\nexit ${options.exitCode ?? 0}\n`,
  );
  await chmod(nvidiaSmi, 0o755);
  for (const gpu of gpus) {
    if (gpu.minor === undefined) continue;
    const folder = join(driverDir, `${gpu.busId.slice(4)}`.toLowerCase());
    await mkdir(folder, { recursive: true });
    await writeFile(
      join(folder, "information"),
      `Model: \t\t ${gpu.model}\nIRQ:   \t\t 0\nGPU UUID: \t ${gpu.uuid}\nVideo BIOS: \t ??.??.??.??.??\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t ${
        gpu.busId.slice(4)
      }\nDevice Minor: \t ${gpu.minor}\nGPU Excluded:\t No\n`,
    );
    await writeFile(join(deviceDir, `nvidia${gpu.minor}`), "");
  }
  for (const name of ["nvidiactl", "nvidia-uvm"]) await writeFile(join(deviceDir, name), "");
  return { nvidiaSmi, driverDir, deviceDir, remove: () => rm(dir, { recursive: true, force: true }) };
}

/** Whether a real nvidia-smi answers here (a machine with an NVIDIA GPU and its driver). */
export function realNvidiaSmiAnswers(): boolean {
  try {
    execFileSync("nvidia-smi", ["-L"], { stdio: ["ignore", "pipe", "ignore"], timeout: 30_000 });
    return true;
  } catch {
    return false;
  }
}
