/**
 * The host's NVIDIA driver files a GPU replica in an image is shown (`findDriverFiles`), found as the
 * NVIDIA container toolkit finds them: by soname, links resolved, the driver's version from libcuda's file
 * name, another version's files left out. A fake driver folder stands for the linker's cache.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { findDriverFiles, parseLdconfig } from "../../server/gpus/mod.ts";

const LDCONFIG = `1234 libs found in cache \`/etc/ld.so.cache'
\tlibnvidia-ml.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-ml.so.1
\tlibnvidia-ml.so.1 (libc6) => /lib/i386-linux-gnu/libnvidia-ml.so.1
\tlibcuda.so.1 (libc6) => /lib/i386-linux-gnu/libcuda.so.1
\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1
\tlibcuda.so.1 (libc6,x86-64) => /usr/local/lib/libcuda.so.1
\tlibcuda.so.1 (libc6,AArch64) => /lib/aarch64-linux-gnu/libcuda.so.1
\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1
`;

describe("parseLdconfig", () => {
  it("keeps the host architecture's entries, the first per name", () => {
    const x64 = parseLdconfig(LDCONFIG, "x64");
    assert.equal(x64.get("libcuda.so.1"), "/lib/x86_64-linux-gnu/libcuda.so.1");
    assert.equal(x64.get("libnvidia-ml.so.1"), "/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
    assert.equal(x64.size, 3);
    assert.equal(parseLdconfig(LDCONFIG, "arm64").get("libcuda.so.1"), "/lib/aarch64-linux-gnu/libcuda.so.1");
  });
});

describe("findDriverFiles in a fake driver folder", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-driver-files-"));
    const files = [
      "libcuda.so.550.54.14",
      "libnvidia-ml.so.550.54.14",
      "libnvidia-nvvm.so.550.54.14",
      "libnvidia-gpucomp.so.550.54.14",
      // An older driver's leftovers: never shown with 550's libcuda.
      "libnvidia-ptxjitcompiler.so.535.104.05",
      "libnvidia-gpucomp.so.535.104.05",
      "nvidia-smi",
    ];
    for (const name of files) await writeFile(join(dir, name), "");
    await symlink("libcuda.so.550.54.14", join(dir, "libcuda.so.1"));
    await symlink("libnvidia-ml.so.550.54.14", join(dir, "libnvidia-ml.so.1"));
    await symlink("libnvidia-nvvm.so.550.54.14", join(dir, "libnvidia-nvvm.so.4"));
    await symlink("libnvidia-ptxjitcompiler.so.535.104.05", join(dir, "libnvidia-ptxjitcompiler.so.1"));
    await symlink("libnvidia-opencl.so.550.54.14", join(dir, "libnvidia-opencl.so.1")); // to nothing
    await symlink("libcuda.so.1", join(dir, "libcuda.so")); // a development link: not a soname shown
  });
  after(async () => {
    if (dir?.startsWith(join(tmpdir(), "runplane-driver-files-"))) await rm(dir, { recursive: true, force: true });
  });

  it("shows each real file under its soname, of libcuda's driver version only, with nvidia-smi", () => {
    const found = findDriverFiles({ libraryDir: dir, nvidiaSmi: join(dir, "nvidia-smi") });
    assert.equal(found.version, "550.54.14");
    assert.deepEqual(
      found.libraries.map(({ file, name }) => [name, file]).sort(),
      [
        ["libcuda.so.1", join(dir, "libcuda.so.550.54.14")],
        ["libnvidia-gpucomp.so.550.54.14", join(dir, "libnvidia-gpucomp.so.550.54.14")],
        ["libnvidia-ml.so.1", join(dir, "libnvidia-ml.so.550.54.14")],
        ["libnvidia-nvvm.so.4", join(dir, "libnvidia-nvvm.so.550.54.14")],
      ],
    );
    assert.deepEqual(found.programs, [{ file: join(dir, "nvidia-smi"), name: "nvidia-smi" }]);
    assert.equal(found.problems.length, 2, found.problems.join("\n"));
    assert.match(found.problems.join("\n"), /libnvidia-ptxjitcompiler\.so\.1 .*535\.104\.05.*left out/);
    assert.match(found.problems.join("\n"), /libnvidia-opencl\.so\.1 .*names no plain file/);
  });

  it("finds nothing, and does not throw, where there is no driver", () => {
    const found = findDriverFiles({ libraryDir: join(dir, "absent"), nvidiaSmi: join(dir, "absent", "nvidia-smi") });
    assert.deepEqual(found, { version: null, libraries: [], programs: [], problems: [] });
  });
});
