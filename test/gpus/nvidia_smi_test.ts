/** The host's GPU inventory: nvidia-smi's CSV as it prints it, run as a real (fake) process, and RUNPLANE_GPUS over it. */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { detectGpus, parseGpuList, parseNvidiaSmiCsv, procFolder } from "../../server/gpus/mod.ts";
import { fakeGpuHost, type FakeGpu, type FakeGpuHost, nvidiaSmiCsv } from "../_helpers/gpus.ts";

const H100 = "NVIDIA H100 80GB HBM3";
const UUID_A = "GPU-3a7b1c9e-52f4-4b6e-9d1a-0c2e8f7a6b5d";
const UUID_B = "GPU-9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b";
const TWO: FakeGpu[] = [
  // Minors unlike the indexes, as on a host that gave this container some of its GPUs.
  { index: 0, uuid: UUID_A, model: H100, memoryMiB: 81559, busId: "00000000:18:00.0", minor: 4 },
  { index: 1, uuid: UUID_B, model: H100, memoryMiB: 81559, busId: "00000000:2A:00.0", minor: 6 },
];

describe("nvidia-smi's CSV", () => {
  it("reads each GPU's index, UUID, model, memory and bus id from the real format, columns found by the header", () => {
    const { gpus, problems } = parseNvidiaSmiCsv(nvidiaSmiCsv(TWO));
    assert.deepEqual(problems, []);
    assert.deepEqual(gpus, [
      { index: 0, uuid: UUID_A, model: H100, memoryMiB: 81559, busId: "00000000:18:00.0" },
      { index: 1, uuid: UUID_B, model: H100, memoryMiB: 81559, busId: "00000000:2A:00.0" },
    ]);
    const reordered = parseNvidiaSmiCsv(
      "name, uuid, index, memory.total [MiB]\r\nTesla T4, GPU-0f0e0d0c-0b0a-0908-0706-050403020100, 0, [N/A]\r\n",
    );
    assert.deepEqual(reordered.gpus, [
      { index: 0, uuid: "GPU-0f0e0d0c-0b0a-0908-0706-050403020100", model: "Tesla T4", memoryMiB: null, busId: null },
    ]);
  });

  it("skips malformed lines, each with a problem naming it, and keeps the rest", () => {
    const text = [
      "index, uuid, name, memory.total [MiB], pci.bus_id",
      `0, ${UUID_A}, ${H100}, 81559 MiB, 00000000:18:00.0`,
      "1, GPU-bbb, NVIDIA H100 80GB HBM3, 81559 MiB",
      `x, GPU-ccc, ${H100}, 81559 MiB, 00000000:2A:00.0`,
      `2, not-a-uuid, ${H100}, 81559 MiB, 00000000:2B:00.0`,
      `3, GPU-ddd, \u001b[31mred, 81559 MiB, 00000000:2C:00.0`,
      `0, GPU-eee, ${H100}, 81559 MiB, 00000000:2D:00.0`,
      `4, GPU-fff, ${H100}, 81559 MiB, nonsense`,
    ].join("\n");
    const { gpus, problems } = parseNvidiaSmiCsv(text);
    assert.deepEqual(gpus.map((g) => g.uuid), [UUID_A, "GPU-fff"]);
    assert.equal(gpus[1].busId, null, "a bus id that is not one is left out, the GPU kept");
    assert.equal(problems.length, 5);
    assert.match(problems[0], /GPU-bbb.*another number of columns/);
    assert.match(problems[1], /index "x" is not a whole number/);
    assert.match(problems[2], /UUID "not-a-uuid" is not GPU-/);
    assert.match(problems[3], /name is empty or not printable ASCII/);
    assert.match(problems[4], /GPU-eee.*listed before/);
  });

  it("refuses output without its header (an error message, another query)", () => {
    assert.throws(
      () => parseNvidiaSmiCsv("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"),
      /no column index, uuid, name, memory.total \[MiB\]/,
    );
    assert.throws(() => parseNvidiaSmiCsv(""), /no column index/);
  });

  it("names the driver's folder of a bus id as /proc/driver/nvidia/gpus does", () => {
    assert.equal(procFolder("00000000:2A:00.0"), "0000:2a:00.0");
    assert.equal(procFolder("0000:2A:00.0"), "0000:2a:00.0");
  });
});

describe("RUNPLANE_GPUS", () => {
  it("takes indexes and UUIDs, each with an optional model; none is no GPU; unset asks nvidia-smi", () => {
    assert.deepEqual(parseGpuList(` 0 , ${UUID_A}:NVIDIA H100 80GB HBM3,GPU-bbb: Tesla T4 `), [
      { index: 0 },
      { uuid: UUID_A, model: "NVIDIA H100 80GB HBM3" },
      { uuid: "GPU-bbb", model: "Tesla T4" },
    ]);
    assert.deepEqual(parseGpuList("none"), []);
    assert.equal(parseGpuList(""), null);
    assert.equal(parseGpuList("  "), null);
  });

  it("refuses what is neither an index nor a UUID, an empty model, and a GPU listed twice", () => {
    assert.throws(() => parseGpuList("0,gpu0"), /"gpu0" is neither a GPU index .* nor a UUID/);
    assert.throws(() => parseGpuList("0,,1"), /"" is neither/);
    assert.throws(() => parseGpuList("GPU-a;rm -rf /"), /neither/);
    assert.throws(() => parseGpuList("GPU-aaa:"), /no model after ":"/);
    assert.throws(() => parseGpuList("1,1"), /GPU 1 is listed twice/);
    assert.throws(() => parseGpuList("GPU-aaa,gpu-AAA"), /neither/, "UUIDs start GPU- in capitals");
    assert.throws(() => parseGpuList("GPU-aaa,GPU-AAA"), /listed twice/);
  });
});

describe("the host's inventory", () => {
  let host: FakeGpuHost;
  before(async () => (host = await fakeGpuHost(TWO)));
  after(() => host.remove());

  it("is nvidia-smi's list, each GPU's device minor read from the driver's information file", async () => {
    const inventory = await detectGpus({ list: null, nvidiaSmi: host.nvidiaSmi, procDir: host.driverDir });
    assert.deepEqual(inventory, {
      source: "nvidia-smi",
      problems: [],
      gpus: [
        { id: UUID_A, index: 0, uuid: UUID_A, model: H100, memoryMiB: 81559, minor: 4 },
        { id: UUID_B, index: 1, uuid: UUID_B, model: H100, memoryMiB: 81559, minor: 6 },
      ],
    });
  });

  it("assumes the index as the minor where the driver's file is not readable, and says so", async () => {
    const inventory = await detectGpus({ list: null, nvidiaSmi: host.nvidiaSmi, procDir: "/nonexistent" });
    assert.deepEqual(inventory.gpus.map((g) => g.minor), [0, 1]);
    assert.equal(inventory.problems.length, 2);
    assert.match(inventory.problems[0], /GPU 0 .*device minor could not be read .*\/dev\/nvidia0 is assumed/);
  });

  it("with RUNPLANE_GPUS, is the GPUs it names: nvidia-smi's where it lists them, the others as given", async () => {
    const inventory = await detectGpus({
      list: parseGpuList(`1,GPU-fake:Tesla T4`),
      nvidiaSmi: host.nvidiaSmi,
      procDir: host.driverDir,
    });
    assert.equal(inventory.source, "RUNPLANE_GPUS");
    assert.deepEqual(inventory.gpus, [
      { id: UUID_B, index: 1, uuid: UUID_B, model: H100, memoryMiB: 81559, minor: 6 },
      { id: "GPU-fake", index: null, uuid: "GPU-fake", model: "Tesla T4", memoryMiB: null, minor: null },
    ]);
    assert.equal(inventory.problems.length, 1);
    assert.match(inventory.problems[0], /names GPU GPU-fake, which nvidia-smi does not list/);
  });

  it("uses one GPU named by its index and by its UUID once", async () => {
    const inventory = await detectGpus({
      list: parseGpuList(`0,${UUID_A}`),
      nvidiaSmi: host.nvidiaSmi,
      procDir: host.driverDir,
    });
    assert.deepEqual(inventory.gpus.map((g) => g.id), [UUID_A]);
    assert.match(inventory.problems.join(), /names one GPU twice/);
  });

  it("is empty without nvidia-smi, and RUNPLANE_GPUS=none does not run it", async () => {
    assert.deepEqual(await detectGpus({ list: null, nvidiaSmi: "/nonexistent/nvidia-smi" }), {
      gpus: [],
      source: "none",
      problems: [],
    });
    const none = await detectGpus({ list: [], nvidiaSmi: "/nonexistent/nvidia-smi" });
    assert.deepEqual(none, { gpus: [], source: "RUNPLANE_GPUS", problems: [] });
    // Without nvidia-smi, RUNPLANE_GPUS is a fake inventory: an index is its own minor.
    const fake = await detectGpus({ list: parseGpuList("0,GPU-bbb"), nvidiaSmi: "/nonexistent/nvidia-smi" });
    assert.deepEqual(fake.gpus.map((g) => [g.id, g.minor]), [["0", 0], ["GPU-bbb", null]]);
    assert.deepEqual(fake.problems, []);
  });

  it("is empty with a problem when nvidia-smi fails (no driver), quoting what it said", async () => {
    const broken = await fakeGpuHost([], {
      output: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
      exitCode: 9,
    });
    try {
      const inventory = await detectGpus({ list: null, nvidiaSmi: broken.nvidiaSmi });
      assert.deepEqual(inventory.gpus, []);
      assert.equal(inventory.problems.length, 1);
      assert.match(inventory.problems[0], /failed \(NVIDIA-SMI has failed because .*driver\.\): no GPU is used/);
    } finally {
      await broken.remove();
    }
  });

  it("keeps nvidia-smi's good lines and reports its malformed ones", async () => {
    const odd = await fakeGpuHost([], { output: `${nvidiaSmiCsv(TWO)}7, GPU-x, broken\n` });
    try {
      const inventory = await detectGpus({ list: null, nvidiaSmi: odd.nvidiaSmi, procDir: host.driverDir });
      assert.deepEqual(inventory.gpus.map((g) => g.index), [0, 1]);
      assert.equal(inventory.problems.length, 1);
      assert.match(inventory.problems[0], /"7, GPU-x, broken" is skipped/);
    } finally {
      await odd.remove();
    }
  });
});
