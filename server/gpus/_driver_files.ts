/**
 * The host's NVIDIA driver user-space files a GPU replica in an image needs, found as the NVIDIA container
 * toolkit (libnvidia-container's `nvc_info`) finds them: the driver's libraries by soname in the dynamic
 * linker's cache (`ldconfig -p`, the host's own architecture), the driver's version read from the file
 * `libcuda.so.1` names (`libcuda.so.550.54.14`), a library whose soname is that version
 * (`libnvidia-gpucomp.so.550.54.14`) taken only for it, and a file of another version left out (a stale
 * one of an older driver). Each link is resolved to the real file, shown under its soname. `nvidia-smi` is
 * the one program. They must match the host's kernel driver, which is why the image cannot bring its own.
 */
import { execFileSync } from "node:child_process";
import { lstatSync, readdirSync, realpathSync } from "node:fs";
import { basename, delimiter, isAbsolute, join } from "node:path";

/** A host file and the name a jail shows it under. */
export interface DriverFile {
  /** The real file (no link). */
  file: string;
  name: string;
}

/** What `findDriverFiles` found. */
export interface DriverFiles {
  /** The driver's version (`550.54.14`), read from libcuda's (or NVML's) file name; null when unknown. */
  version: string | null;
  libraries: DriverFile[];
  programs: DriverFile[];
  /** Libraries left out (a link to nothing, another driver version's file): each says why. */
  problems: string[];
}

/** Where to look (tests point them at a fake driver). */
export interface DriverFilesOptions {
  /** A folder holding the libraries, searched instead of the linker's cache (`ldconfig -p`). */
  libraryDir?: string;
  /** The `nvidia-smi` to show: a path, or a name searched on the server's `PATH`; default `nvidia-smi`. */
  nvidiaSmi?: string;
}

/**
 * The sonames of libnvidia-container's utility and compute libraries (what a container gets by default,
 * `NVIDIA_DRIVER_CAPABILITIES=compute,utility`): NVML and its config, the CUDA driver, its debugger, the
 * PTX JIT compiler, NVVM, the allocator and OpenCL.
 */
export const DRIVER_LIBRARIES = [
  "libnvidia-ml.so.1",
  "libnvidia-cfg.so.1",
  "libcuda.so.1",
  "libcudadebugger.so.1",
  "libnvidia-opencl.so.1",
  "libnvidia-ptxjitcompiler.so.1",
  "libnvidia-nvvm.so.4",
  "libnvidia-allocator.so.1",
];

/** Libraries whose soname ends in the driver's version (`libnvidia-gpucomp.so.550.54.14`). */
export const VERSIONED_DRIVER_LIBRARIES = [
  "libnvidia-gpucomp.so",
  "libnvidia-pkcs11.so",
  "libnvidia-pkcs11-openssl3.so",
];

/** How `ldconfig -p` names the host's own architecture (a 32-bit library is never the one). */
const LDCONFIG_ARCH: Record<string, string> = { x64: "x86-64", arm64: "AArch64" };

/**
 * The entries of `ldconfig -p`'s output for `arch` (Node's `process.arch`; another architecture's, a 32-bit
 * library's above all, left out; all where the architecture is not known), the first (preferred) per name.
 */
export function parseLdconfig(text: string, arch: string = process.arch): Map<string, string> {
  const entries = new Map<string, string>();
  const wanted = LDCONFIG_ARCH[arch];
  for (const line of text.split("\n")) {
    const match = line.match(/^\s+(\S+) \(([^)]*)\) => (\/.+)$/);
    if (!match || (wanted && !match[2].split(",").includes(wanted))) continue;
    if (!entries.has(match[1])) entries.set(match[1], match[3]);
  }
  return entries;
}

/** The linker cache's entries (none where `ldconfig` cannot be run). */
function ldconfigEntries(): Map<string, string> {
  try {
    const text = execFileSync("ldconfig", ["-p"], {
      encoding: "utf8",
      timeout: 10_000,
      env: { PATH: "/usr/sbin:/sbin:/usr/bin:/bin" },
      stdio: ["ignore", "pipe", "ignore"],
    });
    return parseLdconfig(text);
  } catch {
    return new Map();
  }
}

/** The entries of a folder of libraries, by name. */
function folderEntries(dir: string): Map<string, string> {
  const names = readdirSync(dir, { withFileTypes: true }).map((entry) => entry.name);
  return new Map(names.map((name) => [name, join(dir, name)]));
}

/** The real plain file `path` names, or undefined. */
function realFile(path: string): string | undefined {
  try {
    const real = realpathSync(path);
    return lstatSync(real).isFile() ? real : undefined;
  } catch {
    return undefined;
  }
}

/** The driver version a real file's name ends in (`libcuda.so.550.54.14` → `550.54.14`). */
function versionOf(file: string, soname: string): string | null {
  const prefix = soname.slice(0, soname.lastIndexOf(".so.") + 4);
  const name = basename(file);
  const version = name.startsWith(prefix) ? name.slice(prefix.length) : "";
  return /^\d+(\.\d+)+$/.test(version) ? version : null;
}

/** The `nvidia-smi` to show: `nvidiaSmi` itself when a path, else the first on the server's PATH. */
function findNvidiaSmi(nvidiaSmi: string): DriverFile[] {
  const candidates = isAbsolute(nvidiaSmi)
    ? [nvidiaSmi]
    : (process.env.PATH ?? "/usr/bin:/bin").split(delimiter).filter(isAbsolute).map((dir) => join(dir, nvidiaSmi));
  for (const candidate of candidates) {
    const file = realFile(candidate);
    if (file) return [{ file, name: "nvidia-smi" }];
  }
  return [];
}

/** Reads the driver's files; never throws. */
function readDriverFiles(options: DriverFilesOptions): DriverFiles {
  let entries: Map<string, string>;
  try {
    entries = options.libraryDir ? folderEntries(options.libraryDir) : ldconfigEntries();
  } catch {
    entries = new Map();
  }
  const problems: string[] = [];
  const resolved = new Map<string, string>();
  for (const soname of DRIVER_LIBRARIES) {
    const path = entries.get(soname);
    if (path === undefined) continue;
    const file = realFile(path);
    if (file) resolved.set(soname, file);
    else problems.push(`${soname} (${path}) names no plain file: left out`);
  }
  const version = ["libcuda.so.1", "libnvidia-ml.so.1"].map((soname) => {
    const file = resolved.get(soname);
    return file ? versionOf(file, soname) : null;
  }).find((found) => found !== null) ?? null;
  const libraries: DriverFile[] = [];
  for (const [soname, file] of resolved) {
    const own = versionOf(file, soname);
    if (version && own && own !== version) {
      problems.push(`${soname} is ${file}, of driver ${own}, not ${version}: left out`);
    } else libraries.push({ file, name: soname });
  }
  for (const prefix of version ? VERSIONED_DRIVER_LIBRARIES : []) {
    const path = entries.get(`${prefix}.${version}`);
    const file = path === undefined ? undefined : realFile(path);
    if (file) libraries.push({ file, name: `${prefix}.${version}` });
  }
  return { version, libraries, programs: findNvidiaSmi(options.nvidiaSmi ?? "nvidia-smi"), problems };
}

/** Found once per options: the driver's user-space files change only with the kernel driver (a restart). */
const found = new Map<string, DriverFiles>();

/**
 * The host's NVIDIA driver libraries and `nvidia-smi` (see the module's comment), found on first use and
 * kept. None on a host without the driver. Never throws.
 */
export function findDriverFiles(options: DriverFilesOptions = {}): DriverFiles {
  const key = JSON.stringify([options.libraryDir ?? null, options.nvidiaSmi ?? null]);
  let files = found.get(key);
  if (!files) {
    files = readDriverFiles(options);
    found.set(key, files);
  }
  return files;
}
