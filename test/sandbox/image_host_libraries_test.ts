/**
 * A GPU replica's driver libraries in an image jail (issue 46): host files (`JailSpec.hostLibraries`) shown
 * read-only at `/.runplane/driver/lib` and found by the dynamic loader, as the NVIDIA container toolkit
 * does. No GPU here: a fake `libcuda.so.1`, a real shared library built with gcc exporting
 * `cuDriverGetVersion`, is opened by the image's python3 with ctypes.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { createSandbox, type JailSpec, type Sandbox } from "../../server/sandbox/mod.ts";
import { imageToolsWork, unpackTestImage } from "../_helpers/images.ts";
import { runJailed, sandboxWorks } from "../_helpers/sandbox.ts";

const run = promisify(execFile);
const HOST_TMP = "/var/tmp";
const PREFIX = "runplane-host-libraries-";

const FAKE_CUDA = `
int cuDriverGetVersion(int *version) { *version = 12040; return 0; }
`;

const OPEN_CUDA = `
import ctypes, os
lib = ctypes.CDLL("libcuda.so.1")
version = ctypes.c_int()
print("status:", lib.cuDriverGetVersion(ctypes.byref(version)))
print("version:", version.value)
print("ld_library_path:", os.environ.get("LD_LIBRARY_PATH"))
print("listed:", ",".join(sorted(os.listdir("/.runplane/driver/lib"))))
try:
    open("/.runplane/driver/lib/libcuda.so.1", "ab")
    print("write: ok")
except OSError as e:
    print("write:", e.errno)
`;

function jailed(sandbox: Sandbox, command: string[], spec: Partial<JailSpec>) {
  return runJailed(sandbox, command, { projectId: "p-gpu-image", ...spec });
}

if (await imageToolsWork("the host library tests") && await sandboxWorks("the host library tests")) {
  describe("an image jail shown the host's driver libraries", () => {
    let sandbox: Sandbox;
    let dir: string;
    let root: string;
    let driver: string;
    before(async () => {
      sandbox = await createSandbox("required", { logger: createLogger({ level: "silent" }) });
      dir = await mkdtemp(join(HOST_TMP, PREFIX));
      await chmod(dir, 0o755);
      root = join(dir, "root");
      await unpackTestImage(root);
      driver = join(dir, "driver");
      await mkdir(driver);
      await chmod(driver, 0o755);
      await writeFile(join(dir, "cuda.c"), FAKE_CUDA);
      await run("gcc", ["-shared", "-fPIC", "-o", join(driver, "libcuda.so.535.1"), join(dir, "cuda.c")]);
      await chmod(join(driver, "libcuda.so.535.1"), 0o755);
      await symlink("libcuda.so.535.1", join(driver, "libcuda.so.1"));
    });
    after(async () => {
      sandbox?.close();
      if (dir?.startsWith(join(HOST_TMP, PREFIX))) await rm(dir, { recursive: true, force: true });
    });

    it("lets the image's python dlopen the host's libcuda.so.1, read-only, without changing the image", async () => {
      const before = await readdir(join(root, "usr", "lib", "x86_64-linux-gnu"));
      const out = await jailed(sandbox, ["python3", "-c", OPEN_CUDA], {
        image: { root },
        // The file a soname link names, shown under the soname (what a driver lookup gives).
        hostLibraries: [join(driver, "libcuda.so.535.1")],
      });
      // A name of its own is wanted: the loader opens "libcuda.so.1".
      assert.equal(out.code, 1, "libcuda.so.535.1 alone does not answer libcuda.so.1");
      const named = join(dir, "named");
      await mkdir(named);
      await chmod(named, 0o755);
      await run("cp", ["--", join(driver, "libcuda.so.535.1"), join(named, "libcuda.so.1")]);
      const ok = await jailed(sandbox, ["python3", "-c", OPEN_CUDA], {
        image: { root },
        hostLibraries: [join(named, "libcuda.so.1")],
      });
      assert.equal(ok.code, 0, ok.stderr);
      assert.match(ok.stdout, /^status: 0$/m);
      assert.match(ok.stdout, /^version: 12040$/m);
      assert.match(ok.stdout, /^ld_library_path: \/\.runplane\/driver\/lib$/m);
      assert.match(ok.stdout, /^listed: libcuda\.so\.1$/m);
      assert.match(ok.stdout, /^write: (13|30)$/m); // EACCES (root's file) or EROFS (the read-only bind)
      assert.deepEqual(await readdir(join(root, "usr", "lib", "x86_64-linux-gnu")), before);
    });

    it("refuses a link, a relative path, or host libraries outside a read-only image jail", () => {
      const spawn = (spec: Partial<JailSpec>) =>
        sandbox.spawn("true", [], {
          jail: { projectId: "p-gpu-image", cwd: "/", egress: false, env: {}, ...spec },
          stdio: ["ignore", "ignore", "ignore"],
        });
      assert.throws(() => spawn({ image: { root }, hostLibraries: [join(driver, "libcuda.so.1")] }), /plain file/);
      assert.throws(() => spawn({ image: { root }, hostLibraries: ["libcuda.so.1"] }), /plain file/);
      assert.throws(() => spawn({ hostLibraries: [join(driver, "libcuda.so.535.1")] }), /read-only image jail/);
    });
  });
}
