import { readFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";

/** The machine a benchmark ran on. */
export interface MachineInfo {
  cpuModel: string;
  cores: number;
  memoryGiB: number;
  node: string;
  platform: string;
}

/** Describes this machine. */
export function machineInfo(): MachineInfo {
  const cpu = cpus();
  return {
    cpuModel: cpu[0]?.model.trim() ?? "unknown",
    cores: cpu.length,
    memoryGiB: Math.round(totalmem() / 1024 ** 3),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
  };
}

/** The machine's CPU time so far, summed over its cores (clock ticks). */
export interface CpuTimes {
  busy: number;
  idle: number;
}

/**
 * Reads the machine's CPU time now (every process's, not only the benchmark's) from /proc/stat: busy is
 * user, nice, system, irq, softirq and steal (libuv's `os.cpus()` leaves softirq out, where loopback
 * networking spends much), idle is idle and iowait.
 */
export function cpuTimes(): CpuTimes {
  const [user, nice, system, idle, iowait, irq, softirq, steal] = readFileSync("/proc/stat", "utf8")
    .split("\n")[0].trim().split(/\s+/).slice(1, 9).map(Number);
  return { busy: user + nice + system + irq + softirq + (steal || 0), idle: idle + iowait };
}

/** How many cores the whole machine kept busy on average since `start` (0 to the number of cores). */
export function busyCoresSince(start: CpuTimes): number {
  const now = cpuTimes();
  const busy = now.busy - start.busy;
  const total = busy + now.idle - start.idle;
  return total > 0 ? (cpus().length * busy) / total : 0;
}
