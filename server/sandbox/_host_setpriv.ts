/**
 * The privilege drop of a jail whose `/` is an image: the HOST's `setpriv`, started through the host's own
 * dynamic loader and libraries from the host's `/usr` bound read-only at `HOST_USR`. The image's
 * `/usr/bin/setpriv`, its loader and its libraries are tenant content and never run while the process still
 * holds a capability. Why the loader is named explicitly: exec'ing `/.runplane/host/usr/bin/setpriv` would
 * have the kernel load the interpreter its ELF header names (`/lib64/ld-linux-x86-64.so.2`), which inside the
 * jail is the image's. The loader still reads `/etc/ld.so.preload` (no option turns that off), which is why
 * an image's preload file is covered by an empty one (`_image_root.ts`); `--inhibit-cache` keeps it from the
 * image's `/etc/ld.so.cache`, and `--library-path` finds every library in the host's folders first.
 */
import { execFileSync } from "node:child_process";
import { readFileSync, realpathSync } from "node:fs";
import { dirname } from "node:path";

/** Where the host's `/usr` is bound, read-only, in a jail whose `/` is an image. */
export const HOST_USR = "/.runplane/host/usr";

const SETPRIV = "/usr/bin/setpriv";
const PT_INTERP = 3;

/** The interpreter an ELF64 little-endian executable names in its `PT_INTERP` program header. */
function elfInterpreter(path: string): string {
  const elf = readFileSync(path);
  if (elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2 || elf[5] !== 1) {
    throw new Error(`${path} is not a 64-bit little-endian ELF executable`);
  }
  const phoff = Number(elf.readBigUInt64LE(0x20));
  const phentsize = elf.readUInt16LE(0x36);
  const phnum = elf.readUInt16LE(0x38);
  for (let i = 0; i < phnum; i++) {
    const header = phoff + i * phentsize;
    if (elf.readUInt32LE(header) !== PT_INTERP) continue;
    const offset = Number(elf.readBigUInt64LE(header + 0x08));
    const size = Number(elf.readBigUInt64LE(header + 0x20));
    return elf.subarray(offset, offset + size).toString("latin1").replace(/\0+$/, "");
  }
  throw new Error(`${path} names no dynamic loader (a static program needs none: run it directly)`);
}

/** `path` (a host path) as the jail sees it under `HOST_USR`; only what lives under the host's `/usr` is there. */
function inHostUsr(path: string): string {
  const real = realpathSync(path);
  if (!real.startsWith("/usr/")) {
    throw new Error(
      `${real} is outside the host's /usr: a jail whose / is an image needs a merged-/usr host (setpriv, python3, their loader and libraries under /usr)`,
    );
  }
  return `${HOST_USR}${real.slice("/usr".length)}`;
}

/** The commands found so far, by the host path of their program. */
const made = new Map<string, string[]>();

/**
 * `[loader, its options, program]` as paths inside a jail whose `/` is an image: what runs the host's
 * `program` (a host path under `/usr`) there with the host's loader and libraries only, never the image's
 * (see the module's comment). Found once per program from the host's own files. The loader's own folder is
 * searched too, for what a program opens itself (Python's ctypes and extension modules).
 */
export function hostProgramInImage(program: string): string[] {
  const known = made.get(program);
  if (known) return known;
  const real = realpathSync(program);
  const loader = realpathSync(elfInterpreter(real));
  // `--list` is ldd: the loader resolves the program's libraries as it would for a run, without running it.
  const listed = execFileSync(loader, ["--list", real], { encoding: "utf8" });
  const folders = new Set<string>([dirname(inHostUsr(loader))]);
  for (const match of listed.matchAll(/=> (\/\S+) \(0x/g)) folders.add(dirname(inHostUsr(match[1])));
  const command = [inHostUsr(loader), "--inhibit-cache", "--library-path", [...folders].join(":"), inHostUsr(real)];
  made.set(program, command);
  return command;
}

/**
 * setpriv's options that make the process `uid`/`gid` with no supplementary group, no capability (inherited
 * or in the bounding set) and no_new_privs, up to the `--` before the command.
 */
export function setprivOptions(identity: { uid: number; gid: number }): string[] {
  return [
    `--reuid=${identity.uid}`,
    `--regid=${identity.gid}`,
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
    "--",
  ];
}

/** The prefix that drops a root bubblewrap's child to `uid`/`gid` with no capability, using only host binaries. */
export function hostDropPrivileges(identity: { uid: number; gid: number }): string[] {
  return [...hostProgramInImage(SETPRIV), ...setprivOptions(identity)];
}
