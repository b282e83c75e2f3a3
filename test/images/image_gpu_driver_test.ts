/**
 * A GPU replica in an image is shown the host's driver (issue 46), as the NVIDIA container toolkit does:
 * its GPU's device nodes, the driver's libraries by soname at `/.runplane/driver/lib` (found by the image's
 * loader), and `nvidia-smi` last on `PATH`. No GPU here: a fake inventory (the fake nvidia-smi of
 * test/_helpers/gpus.ts, fake device nodes) and a fake driver folder standing for the linker's cache, whose
 * `libcuda.so.1` links to a gcc-built `libcuda.so.550.54.14` exporting `cuDriverGetVersion`. A real server
 * deploys two apps on the test image (Debian trixie): one with `gpu_count = 1`, one without.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { fakeGpuHost, type FakeGpuHost } from "../_helpers/gpus.ts";
import { hostHas, type ImageAppsServer, startImageAppsServer } from "../_helpers/image_apps.ts";
import { imageToolsWork } from "../_helpers/images.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";

const run = promisify(execFile);
const HOST_TMP = "/var/tmp";
const PREFIX = "runplane-image-gpu-driver-";

const FAKE_CUDA = "int cuDriverGetVersion(int *version) { *version = 12040; return 0; }\n";

const GPU = {
  index: 0,
  uuid: "GPU-11111111-2222-3333-4444-555555555555",
  model: "NVIDIA H100 80GB HBM3",
  memoryMiB: 81559,
  busId: "00000000:18:00.0",
  minor: 0,
};

/** What a replica finds of a GPU driver. */
const DRIVER_APP = `import ctypes, os, shutil, subprocess

def run():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        cuda = {"status": lib.cuDriverGetVersion(ctypes.byref(version)), "version": version.value}
    except OSError as error:
        cuda = {"error": str(error)}
    smi = shutil.which("nvidia-smi")
    # The fake nvidia-smi answers anything but Runplane's query with "unexpected arguments" (exit 2).
    ran = subprocess.run([smi], capture_output=True, text=True) if smi else None
    with open("/etc/os-release") as f:
        codename = [line.split("=", 1)[1].strip() for line in f if line.startswith("VERSION_CODENAME=")][0]
    return {
        "cuda": cuda,
        "smi": smi,
        "smi_ran": [ran.returncode, ran.stderr.strip()] if ran else None,
        "devices": sorted(name for name in os.listdir("/dev") if name.startswith("nvidia")),
        "path": os.environ["PATH"],
        "codename": codename,
    }
`;

function app(reference: string, name: string, hardware: string): Record<string, string> {
  return {
    "runplane.toml": `[deployment]\nname = "${name}"\n[build]\nbase_image = "${reference}"\n${hardware}`,
    "main.py": DRIVER_APP,
  };
}

describe("a GPU replica in an image", async () => {
  const ready = await imageToolsWork("GPU driver files in images") && await sandboxWorks("GPU driver files in images")
    && await hostHas("gcc");
  let apps: ImageAppsServer;
  let host: FakeGpuHost;
  let dir: string;

  before(async () => {
    if (!ready) return;
    host = await fakeGpuHost([GPU]);
    dir = await mkdtemp(join(HOST_TMP, PREFIX));
    await chmod(dir, 0o755);
    await writeFile(join(dir, "cuda.c"), FAKE_CUDA);
    await run("gcc", ["-shared", "-fPIC", "-o", join(dir, "libcuda.so.550.54.14"), join(dir, "cuda.c")]);
    await chmod(join(dir, "libcuda.so.550.54.14"), 0o755);
    await symlink("libcuda.so.550.54.14", join(dir, "libcuda.so.1"));
    apps = await startImageAppsServer({
      env: { RUNPLANE_SANDBOX: "required", RUNPLANE_NVIDIA_SMI: host.nvidiaSmi },
      gpuPaths: { devices: host.deviceDir, driver: host.driverDir, libraries: dir },
    });
  });

  after(async () => {
    await apps?.close();
    await host?.remove();
    if (dir?.startsWith(join(HOST_TMP, PREFIX))) await rm(dir, { recursive: true, force: true });
  });

  it("gets the host's libcuda.so.1, nvidia-smi and device nodes; a replica without a GPU none", {
    skip: !ready,
  }, async () => {
    for (const [name, hardware] of [["gpu", "[hardware]\ngpu_count = 1\n"], ["cpu", ""]]) {
      const { deployment, log } = await apps.deployed(name, app(apps.reference, name, hardware));
      assert.equal(deployment.status, "ready", `${deployment.error}\n${log}`);
    }
    const gpu = await apps.call("gpu");
    assert.equal(gpu.status, 200, JSON.stringify(gpu.body));
    const seen = gpu.body.result!;
    assert.equal(seen.codename, "trixie", "the image's system");
    assert.deepEqual(seen.cuda, { status: 0, version: 12040 }, "the host's (fake) driver, by its soname");
    assert.equal(seen.smi, "/.runplane/driver/bin/nvidia-smi");
    assert.deepEqual(seen.smi_ran, [2, "unexpected arguments:"], "the host's nvidia-smi ran in the image");
    assert.match(String(seen.path), /:\/\.runplane\/driver\/bin$/, "last on PATH: the image's commands first");
    assert.deepEqual(seen.devices, ["nvidia-uvm", "nvidia0", "nvidiactl"]);
    const cpu = await apps.call("cpu");
    assert.equal(cpu.status, 200, JSON.stringify(cpu.body));
    const none = cpu.body.result!;
    assert.match(String((none.cuda as { error?: string }).error), /libcuda\.so\.1/, "no driver without a GPU");
    assert.equal(none.smi, null);
    assert.deepEqual(none.devices, []);
    assert.doesNotMatch(String(none.path), /runplane/);
  });
});
