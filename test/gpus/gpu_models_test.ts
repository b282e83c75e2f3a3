/** Which GPUs `[hardware] compute` asks for, and the device nodes of the GPUs a replica holds. */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { type Gpu, gpuDeviceNodes, gpuMatchesCompute } from "../../server/gpus/mod.ts";

describe("compute", () => {
  it("matches a model named as nvidia-smi names it, in part, or as the established platform names it", () => {
    for (const compute of ["NVIDIA H100 80GB HBM3", "H100", "h100", "HOPPER_H100", "H100_80GB", "nvidia-h100"]) {
      assert.ok(gpuMatchesCompute(compute, "NVIDIA H100 80GB HBM3"), compute);
    }
    assert.ok(gpuMatchesCompute("AMPERE_A100_40GB", "NVIDIA A100-SXM4-40GB"));
    assert.ok(gpuMatchesCompute("ADA_L4", "NVIDIA L4"));
    assert.ok(gpuMatchesCompute("TURING_T4", "Tesla T4"));
    assert.ok(gpuMatchesCompute(undefined, null), "no compute: any GPU");
  });

  it("does not match another model, a word only part of one, or an unknown model", () => {
    assert.equal(gpuMatchesCompute("A10", "NVIDIA A100-SXM4-40GB"), false);
    assert.equal(gpuMatchesCompute("AMPERE_A100_80GB", "NVIDIA A100-SXM4-40GB"), false);
    assert.equal(gpuMatchesCompute("ADA_L4", "NVIDIA L40S"), false);
    assert.equal(gpuMatchesCompute("H100", "NVIDIA H200"), false);
    assert.equal(gpuMatchesCompute("HOPPER", "NVIDIA H100 80GB HBM3"), false, "an architecture alone is no model");
    assert.equal(gpuMatchesCompute("H100", null), false);
  });
});

describe("a replica's device nodes", () => {
  const gpu = (minor: number | null): Gpu => ({
    id: `GPU-${minor}`,
    index: minor,
    uuid: `GPU-${minor}`,
    model: "X",
    memoryMiB: null,
    minor,
  });

  it("are its own GPUs' nodes and the driver's shared ones, those that exist, shown under /dev", async () => {
    const dir = await mkdtemp(join(tmpdir(), "runplane-dev-"));
    try {
      for (const name of ["nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"]) {
        await writeFile(join(dir, name), "");
      }
      assert.deepEqual(gpuDeviceNodes([gpu(2), gpu(0), gpu(5), gpu(null)], { dir }), [
        { source: join(dir, "nvidia2"), target: "/dev/nvidia2" },
        { source: join(dir, "nvidia0"), target: "/dev/nvidia0" },
        { source: join(dir, "nvidiactl"), target: "/dev/nvidiactl" },
        { source: join(dir, "nvidia-uvm"), target: "/dev/nvidia-uvm" },
      ]);
      assert.deepEqual(gpuDeviceNodes([], { dir }), [], "a replica without GPUs gets no node, not even nvidiactl");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
