/**
 * The relay's interpreter in a jail whose `/` is an image: the HOST's python3, started through the host's
 * own dynamic loader and libraries from the host's `/usr`, which the image jail binds read-only at
 * `/.runplane/host/usr` (server/sandbox/_image_root.ts, for the privilege drop). So the relay runs in any
 * image, one without python3 too (a Dockerfile `FROM node:…`), and never runs the image's interpreter.
 * As in server/sandbox/_host_setpriv.ts: exec'ing the host's python by its path would have the kernel load
 * the image's loader (the one the ELF header names), so the host's loader is named, `--inhibit-cache` keeps
 * it from the image's `ld.so.cache` and `--library-path` finds every library (also those dlopen'ed: ctypes)
 * in the host's folders. `-I -S`: no PYTHON* variable, no user or site folders; its prefix is found from its
 * own path (`/.runplane/host/usr/lib/python3.X`), so no PYTHONHOME is needed — and none reaches the app.
 * This process runs as the tenant (after the privilege drop), reading only the host's read-only `/usr`.
 */
import { execFileSync } from "node:child_process";
import { readFileSync, realpathSync } from "node:fs";
import { dirname } from "node:path";

/** Where the sandbox binds the host's `/usr` in an image jail (`HOST_USR` of server/sandbox/_host_setpriv.ts). */
const HOST_USR = "/.runplane/host/usr";
const PYTHON = "/usr/bin/python3";
const PT_INTERP = 3;

/** The interpreter an ELF64 little-endian executable names in its `PT_INTERP` program header. */
function elfInterpreter(path: string): string {
  const elf = readFileSync(path);
  if (elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2 || elf[5] !== 1) {
    throw new Error(`${path} is not a 64-bit little-endian ELF executable`);
  }
  const phoff = Number(elf.readBigUInt64LE(0x20));
  const phentsize = elf.readUInt16LE(0x36);
  for (let i = 0; i < elf.readUInt16LE(0x38); i++) {
    const header = phoff + i * phentsize;
    if (elf.readUInt32LE(header) !== PT_INTERP) continue;
    const offset = Number(elf.readBigUInt64LE(header + 0x08));
    const size = Number(elf.readBigUInt64LE(header + 0x20));
    return elf.subarray(offset, offset + size).toString("latin1").replace(/\0+$/, "");
  }
  throw new Error(`${path} names no dynamic loader`);
}

/** `path` (a host path) as an image jail sees it; only what lives under the host's `/usr` is there. */
function inHostUsr(path: string): string {
  const real = realpathSync(path);
  if (!real.startsWith("/usr/")) {
    throw new Error(`${real} is outside the host's /usr: the relay in an image needs a merged-/usr host`);
  }
  return `${HOST_USR}${real.slice("/usr".length)}`;
}

let made: string[] | undefined;

/**
 * `[loader, its options, python, -I, -S]` as paths inside an image jail: the command that runs a script
 * with the host's python3 there. Found once from the host's own python3.
 */
export function hostPythonInImage(): string[] {
  if (made) return made;
  const python = realpathSync(PYTHON);
  const loader = realpathSync(elfInterpreter(python));
  // `--list` is ldd: the loader resolves python's libraries as it would for a run, without running it.
  const listed = execFileSync(loader, ["--list", python], { encoding: "utf8" });
  const folders = new Set<string>([dirname(inHostUsr(loader))]);
  for (const match of listed.matchAll(/=> (\/\S+) \(0x/g)) folders.add(dirname(inHostUsr(match[1])));
  made = [
    inHostUsr(loader),
    "--inhibit-cache",
    "--library-path",
    [...folders].join(":"),
    inHostUsr(python),
    "-I",
    "-S",
  ];
  return made;
}
