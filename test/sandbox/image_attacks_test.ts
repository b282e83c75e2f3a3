/**
 * A hostile tenant's attacks on a jail whose `/` is an image root (issue 46): those of
 * tenant_attacks_test.ts, build_attacks_test.ts and jail_test.ts that make sense there, tried from the test
 * base image (Debian trixie with python3) run read-only as a replica and writable as a build step, plus the
 * ones an image makes possible: a setuid or file-capability binary it ships, an `/etc/ld.so.preload` and
 * libraries named like the privilege drop's, a `setpriv` of its own, folders that are links to host paths.
 * Where the refusal could come from the host itself (a call an unprivileged uid may not make anyway), the
 * same attack is first shown to work on the host, outside the jail, so that each test fails when its
 * protection is gone.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import {
  chmod,
  chown,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rename,
  rm,
  rmdir,
  symlink,
  unlink,
  writeFile,
} from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { networkInterfaces } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { createSandbox, type JailSpec, type Sandbox } from "../../server/sandbox/mod.ts";
import { identityFor } from "../../server/sandbox/_identity.ts";
import { imageToolsWork, unpackTestImage } from "../_helpers/images.ts";
import { collectOutput, type PeerHost, runJailed, sandboxWorks, startPeerHost } from "../_helpers/sandbox.ts";

const run = promisify(execFile);
const PROJECT = "p-image-attacker";
/** Under `/var`, which the image has too: a host path there is hidden by the image's own `/var`, not by a tmpfs. */
const HOST_TMP = "/var/tmp";
const PREFIX = "runplane-image-attacks-";

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `command` jailed by `spec`; resolves with its exit code, stdout and stderr. */
function jailed(sandbox: Sandbox, command: string[], spec: Partial<JailSpec>): Promise<Outcome> {
  return runJailed(sandbox, command, { projectId: PROJECT, ...spec });
}

/** Each line `name: outcome` of a probe's output, where the outcome is `ok`, a value, or the errno's name. */
function outcomes(stdout: string): Record<string, string> {
  const lines = stdout.trim().split("\n").filter((line) => line.includes(": "));
  return Object.fromEntries(
    lines.map((line) => [line.slice(0, line.indexOf(": ")), line.slice(line.indexOf(": ") + 2)]),
  );
}

/** The host uid the project's jailed processes have: its own (a root server) or the server's. */
function principalUid(): number {
  const identity = identityFor(PROJECT);
  return identity.kind === "root" ? identity.uid : process.getuid!();
}

/** The host's setpriv prefix that runs a command as the project's uid with nothing more: the "no jail" control. */
function asPrincipal(): string[] {
  const identity = identityFor(PROJECT);
  if (identity.kind !== "root") return [];
  const { uid, gid } = identity;
  return ["setpriv", `--reuid=${uid}`, `--regid=${gid}`, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"];
}

const TRY = `
import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):
    try:
        value = fn()
        print(f"{name}: {'ok' if value is None else value}")
    except OSError as e:
        print(f"{name}: {errno.errorcode.get(e.errno, e.errno)}")
def syscall(name, number, *args):
    def call():
        if libc.syscall(number, *args) == -1:
            raise OSError(ctypes.get_errno(), name)
    return call
`;

/**
 * Calls the seccomp filter refuses that an unprivileged uid may otherwise make on this kernel (x86-64
 * numbers; the test runs where the server runs). The control run shows each one working on the host.
 */
const SYSCALLS = `${TRY}
attempt("unshare-user", syscall("unshare", 272, 0x10000000))
attempt("ptrace-traceme", syscall("ptrace", 101, 0, 0, 0, 0))
attempt("keyctl", syscall("keyctl", 250, 0, -3, 1, 0, 0))
attempt("add_key", syscall("add_key", 248, b"user", b"runplane", b"x", 1, -3))
attempt("userfaultfd", syscall("userfaultfd", 323, 1))
attempt("io_uring_setup", syscall("io_uring_setup", 425, 1, ctypes.create_string_buffer(120)))
attempt("name_to_handle_at", syscall("name_to_handle_at", 303, -100, b"/", ctypes.create_string_buffer(200), ctypes.byref(ctypes.c_int()), 0))
attempt("perf_event_open", syscall("perf_event_open", 298, 0, 0, -1, -1, 0))
attempt("vsock", lambda: socket.socket(40, socket.SOCK_STREAM) and None)
`;

/** What the filter answers each of `SYSCALLS`. */
const REFUSED_SYSCALLS: Record<string, string> = {
  "unshare-user": "EPERM",
  "ptrace-traceme": "EPERM",
  keyctl: "EPERM",
  add_key: "EPERM",
  userfaultfd: "EPERM",
  io_uring_setup: "ENOSYS",
  name_to_handle_at: "EPERM",
  perf_event_open: "EPERM",
  vsock: "EAFNOSUPPORT",
};

/** A library whose constructor leaves a file named by its process's euid in `MARKERS`: the proof it loaded. */
const PLANTED_C = `
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/loaded-euid%d-pid%d", MARKERS, (int)geteuid(), (int)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd >= 0) close(fd);
}
`;

/** A host process as the project's uid, outside any jail: what a tenant must not see or signal. */
function startVictim(): ChildProcess {
  const prefix = asPrincipal();
  const command = [...prefix, "/bin/sleep", "600"];
  return spawn(command[0], command.slice(1), { stdio: "ignore" });
}

const SIGNALS = (victim: number) =>
  `${TRY}
import signal
print("processes:", len([p for p in os.listdir("/proc") if p.isdigit()]))
attempt("victim-visible", lambda: os.path.exists("/proc/${victim}/cmdline") and open("/proc/${victim}/cmdline").read() or "no")
attempt("kill-victim", lambda: os.kill(${victim}, signal.SIGKILL))
attempt("kill-all", lambda: os.kill(-1, signal.SIGKILL))
`;

if (
  await imageToolsWork("the image attack tests") && await sandboxWorks("the image attack tests")
) {
  describe("a hostile tenant in a jail whose / is an image", () => {
    let sandbox: Sandbox;
    let dir: string;
    /** The unpacked image, as the store shares it; never changed by a test but for its mount points. */
    let root: string;
    /** A copy of it carrying the attacker's files (setuid binaries, a preload, its own setpriv). */
    let evil: string;
    /** Host files: `app.txt` bound read-only, `rw/` bound writable, `keys/secret` readable by all but not bound. */
    let host: string;
    let markers: string;
    /** A folder anyone may write, outside every image: links in an image point here. */
    let victimDir: string;
    let peer: PeerHost | null;
    let hostListener: Server;
    let hostPort = 0;
    let hostConnections = 0;

    before(async () => {
      sandbox = await createSandbox("required", { logger: createLogger({ level: "silent" }) });
      dir = await mkdtemp(join(HOST_TMP, PREFIX));
      await chmod(dir, 0o755);
      root = join(dir, "root");
      await unpackTestImage(root);
      host = join(dir, "host");
      await mkdir(join(host, "keys"), { recursive: true, mode: 0o755 });
      await writeFile(join(host, "app.txt"), "app");
      await writeFile(join(host, "keys", "secret"), "host-secret", { mode: 0o644 });
      await chmod(join(host, "keys", "secret"), 0o644);
      markers = join(host, "markers");
      await mkdir(markers);
      await chmod(markers, 0o777);
      victimDir = join(dir, "victim");
      await mkdir(victimDir);
      await chmod(victimDir, 0o777);
      evil = await makeEvilImage(root, { dir, markers });
      peer = await startPeerHost("the image egress attacks");
      hostListener = createServer((socket) => {
        hostConnections++;
        socket.end("host-secret");
      });
      await new Promise<void>((resolve) => hostListener.listen(0, "0.0.0.0", resolve));
      hostPort = (hostListener.address() as { port: number }).port;
    });
    after(async () => {
      sandbox?.close();
      peer?.close();
      hostListener?.close();
      // Only the folder this test made with mkdtemp.
      if (dir?.startsWith(join(HOST_TMP, PREFIX))) await rm(dir, { recursive: true, force: true });
    });

    it("sees no host process and signals none, though one runs as its own uid", async () => {
      const victim = startVictim();
      try {
        await new Promise((resolve) => setTimeout(resolve, 200));
        const out = await jailed(sandbox, ["python3", "-c", SIGNALS(victim.pid!)], { image: { root } });
        assert.equal(out.code, 0, out.stderr);
        const seen = outcomes(out.stdout);
        assert.ok(Number(seen.processes) < 5, `the jail sees ${seen.processes} processes`);
        assert.equal(seen["victim-visible"], "no");
        assert.equal(seen["kill-victim"], "ESRCH");
        // Without its own pid namespace, both kills would reach the victim: same uid, nothing else needed.
        assert.equal(victim.exitCode, null);
        assert.equal(victim.signalCode, null, "the host process was killed from the jail");
      } finally {
        victim.kill("SIGKILL");
      }
    });

    it("reads no host file: a world-readable one beside its binds, the host's /etc, /root or /work", async () => {
      const out = await jailed(sandbox, [
        "python3",
        "-c",
        `${TRY}
attempt("read-bound", lambda: open(${JSON.stringify(join(host, "app.txt"))}).read())
attempt("read-beside", lambda: open(${JSON.stringify(join(host, "keys", "secret"))}).read())
attempt("list-host", lambda: ",".join(sorted(os.listdir(${JSON.stringify(host)}))))
attempt("list-runplane-host", lambda: ",".join(sorted(os.listdir("/.runplane/host"))))
attempt("debian_version", lambda: open("/etc/debian_version").read().split(".")[0].strip())
attempt("list-work", lambda: os.listdir("/work"))
attempt("host-root", lambda: os.path.exists("/root/.npm") or os.path.exists("/root/.bashrc") and "visible" or "no")
`,
      ], { image: { root }, readOnly: [join(host, "app.txt")], writable: [markers] });
      assert.equal(out.code, 0, out.stderr);
      assert.deepEqual(outcomes(out.stdout), {
        "read-bound": "app",
        // Readable by everyone on the host, in the folder above a bind: absent here.
        "read-beside": "ENOENT",
        "list-host": "app.txt,markers",
        // Only the host's /usr (for the privilege drop), never its / or /etc.
        "list-runplane-host": "usr",
        "debian_version": "13",
        "list-work": "ENOENT",
        "host-root": "no",
      });
    });

    it("has no capability, no new privileges, the seccomp filter, and not uid 0", async () => {
      const out = await jailed(sandbox, ["cat", "/proc/self/status"], { image: { root } });
      assert.equal(out.code, 0, out.stderr);
      for (const field of ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]) {
        assert.match(out.stdout, new RegExp(`^${field}:\\s+0+$`, "m"), field);
      }
      assert.match(out.stdout, /^NoNewPrivs:\s+1$/m);
      assert.match(out.stdout, /^Seccomp:\s+2$/m);
      const uid = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$/m.exec(out.stdout)!;
      const expected = identityFor(PROJECT).kind === "root" ? principalUid() : 1000;
      assert.deepEqual(uid.slice(1).map(Number), [expected, expected, expected, expected]);
    });

    it("cannot change the image other tenants share, even files its modes let anyone write", async () => {
      const shared = join(evil, "usr", "share", "runplane-shared.txt");
      const before = await readdir(join(evil, "opt", "shared"));
      const out = await jailed(sandbox, [
        "python3",
        "-c",
        `${TRY}
attempt("write-0666-file", lambda: open("/usr/share/runplane-shared.txt", "a").write("pwned") and None)
attempt("create-in-0777-dir", lambda: open("/opt/shared/new", "w") and None)
attempt("create-in-usr", lambda: open("/usr/lib/zz.pth", "w") and None)
attempt("create-in-etc", lambda: open("/etc/zz", "w") and None)
attempt("create-at-root", lambda: open("/new", "w") and None)
attempt("unlink", lambda: os.unlink("/usr/share/runplane-shared.txt"))
attempt("rename", lambda: os.rename("/opt/shared/kept", "/opt/shared/moved"))
attempt("chmod", lambda: os.chmod("/usr/share/runplane-shared.txt", 0o777))
attempt("write-host-usr", lambda: open("/.runplane/host/usr/new", "w") and None)
`,
      ], { image: { root: evil } });
      assert.equal(out.code, 0, out.stderr);
      const got = outcomes(out.stdout);
      for (const [name, outcome] of Object.entries(got)) assert.equal(outcome, "EROFS", `${name}: ${outcome}`);
      assert.equal(Object.keys(got).length, 9);
      // On the host: nothing changed (the modes would have let the tenant's uid do all of it).
      assert.equal(await readFile(shared, "utf8"), "shared\n");
      assert.deepEqual(await readdir(join(evil, "opt", "shared")), before);
    });

    it("cannot remount, unmount, make a namespace, nor make the calls the filter refuses (which the host allows)", async () => {
      const control = await collectOutput(
        spawn(asPrincipal()[0] ?? "/usr/bin/python3", [...asPrincipal().slice(1), "/usr/bin/python3", "-c", SYSCALLS]),
      );
      assert.equal(control.code, 0, control.stderr);
      const allowed = outcomes(control.stdout);
      for (const [name, refused] of Object.entries(REFUSED_SYSCALLS)) {
        // On the host, as the same uid, the call is made (ok, or an error of its own arguments).
        assert.notEqual(allowed[name], refused, `${name} is refused on the host too: the test proves nothing`);
      }
      const out = await jailed(sandbox, [
        "python3",
        "-c",
        `${SYSCALLS}
attempt("remount-usr-rw", syscall("mount", 165, None, b"/usr", None, 32 | 4096, None))
attempt("remount-root-rw", syscall("mount", 165, None, b"/", None, 32, None))
attempt("umount-passwd", syscall("umount2", 166, b"/etc/passwd", 2))
attempt("umount-preload", syscall("umount2", 166, b"/etc/ld.so.preload", 2))
attempt("chroot", syscall("chroot", 161, b"/tmp"))
attempt("clone-newuser", syscall("clone", 56, 0x10000000 | 17, 0, 0, 0, 0))
`,
      ], { image: { root: evil } });
      assert.equal(out.code, 0, out.stderr);
      assert.deepEqual(outcomes(out.stdout), {
        ...REFUSED_SYSCALLS,
        "remount-usr-rw": "EPERM",
        "remount-root-rw": "EPERM",
        "umount-passwd": "EPERM",
        "umount-preload": "EPERM",
        chroot: "EPERM",
        "clone-newuser": "EPERM",
      });
    });

    it("with egress on, reaches a public address but not the host's loopback, own addresses or private ones", async () => {
      const targets: Array<[string, string, number]> = [
        ["loopback", "127.0.0.1", hostPort],
        ["slirp-host", "10.0.2.2", hostPort],
        ["host-address", hostAddress(), hostPort],
        ...(peer
          ? [["peer-private", peer.privateAddress, peer.port], ["peer-public", peer.publicAddress, peer.port]] as Array<
            [string, string, number]
          >
          : []),
      ];
      const code = `${TRY}
def connect(host, port):
    s = socket.create_connection((host, port), timeout=3)
    data = s.recv(100).decode()
    s.close()
    return data or "connected"
${targets.map(([name, address, port]) => `attempt("${name}", lambda: connect("${address}", ${port}))`).join("\n")}
`;
      const out = await jailed(sandbox, ["python3", "-c", code], { image: { root }, egress: true });
      assert.equal(out.code, 0, out.stderr);
      const got = outcomes(out.stdout);
      for (const [name] of targets) {
        if (name === "peer-public") assert.equal(got[name], "peer", "the public address is reachable: egress works");
        else assert.match(got[name], /^E[A-Z]+$/, `${name}: ${got[name]}`);
      }
      assert.equal(hostConnections, 0, "a jailed process reached the host's listener");
    });

    it("gains nothing from a setuid-root or file-capability binary the image ships", async () => {
      const out = await jailed(sandbox, [
        "sh",
        "-c",
        "echo suid-euid: $(/usr/local/bin/suid-id -u); echo suid-ruid: $(/usr/local/bin/suid-id -ru); "
        + "/usr/local/bin/cap-python -c \"import os\nprint('cap-eff:', [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])\n"
        + "try:\n  os.setuid(0); print('setuid0: ok')\nexcept OSError as e: print('setuid0:', e.errno)\"",
      ], { image: { root: evil } });
      assert.equal(out.code, 0, out.stderr);
      const got = outcomes(out.stdout);
      const uid = identityFor(PROJECT).kind === "root" ? principalUid() : 1000;
      // Both are really root's and privileged on the host's view of the image (checked in makeEvilImage).
      assert.equal(got["suid-euid"], String(uid), "the setuid-root binary ran as root");
      assert.equal(got["suid-ruid"], String(uid));
      assert.match(got["cap-eff"], /^0+$/, "the file capabilities were granted");
      assert.equal(got.setuid0, "1"); // EPERM
    });

    it("an image's /etc/ld.so.preload, its own setpriv and libraries named like setpriv's never run as root", async () => {
      // The tenant's own process does load the library when it asks (LD_PRELOAD): it works, and leaves a marker.
      const out = await jailed(sandbox, [
        "sh",
        "-c",
        "/bin/true && LD_PRELOAD=/usr/lib/runplane-planted.so /bin/true && echo done",
      ], { image: { root: evil }, writable: [markers] });
      assert.equal(out.code, 0, out.stderr);
      assert.match(out.stdout, /done/);
      const uid = identityFor(PROJECT).kind === "root" ? principalUid() : 1000;
      const loaded = await readdir(markers);
      assert.ok(loaded.every((name) => !name.startsWith("loaded-euid0-")), `loaded as root: ${loaded.join(", ")}`);
      assert.ok(!loaded.some((name) => name.startsWith("setpriv-ran")), `the image's setpriv ran: ${loaded}`);
      // Only the tenant's LD_PRELOAD: the preload file was covered for the jail's processes, tenant's included.
      assert.equal(loaded.length, 1, loaded.join(", "));
      assert.match(loaded[0], new RegExp(`^loaded-euid${uid}-`));
      for (const name of loaded) await unlink(join(markers, name));
    });

    it("refuses an image whose /home, /etc, /var or /etc/hosts is a link to a host path, writing nothing there", async () => {
      const bound = join(host, "app.txt"); // a readOnly bind under /var: its mount point is made in the image
      const replace = (folder: string, target: string) => async (at: string) => {
        await rmdir(join(at, folder));
        await symlink(target, join(at, folder));
      };
      const layouts: Array<[string, (at: string) => Promise<void>, RegExp]> = [
        ["home", replace("home", victimDir), /The image's \/home is a link/],
        ["etc", replace("etc", victimDir), /The image's \/etc is a link/],
        ["var", replace("var", victimDir), /The image's \/var is a link/],
        ["home-runplane", (at) => symlink(victimDir, join(at, "home", "runplane")), /\/home\/runplane is a link/],
        ["hosts", (at) => symlink(join(victimDir, "hosts"), join(at, "etc", "hosts")), /\/etc\/hosts is a link/],
        ["preload", (at) => symlink(join(victimDir, "x"), join(at, "etc", "ld.so.preload")), /ld\.so\.preload/],
      ];
      for (const [name, plant, refusal] of layouts) {
        const at = join(dir, `linked-${name}`);
        for (const folder of ["usr/bin", "etc", "home", "var"]) await mkdir(join(at, folder), { recursive: true });
        await plant(at);
        assert.throws(() =>
          sandbox.spawn("true", [], {
            jail: { projectId: PROJECT, cwd: "/", egress: true, env: {}, image: { root: at }, readOnly: [bound] },
            stdio: ["ignore", "ignore", "ignore"],
          }), refusal);
        // Each mount point would have been made through the link: in the host folder it names, writable by all.
        assert.deepEqual(await readdir(victimDir), [], `${name}: something was made through the link`);
      }
    });

    describe("writable, as a build step that is root of its own user namespace", () => {
      let copy: string;
      before(async () => {
        copy = join(dir, "build-root");
        await run("cp", ["-a", "--", root, copy]);
        await run("chown", ["-hR", `${principalUid()}:${principalUid()}`, "--", copy]);
        await writeFile(join(host, "root-only"), "root's secret", { mode: 0o600 });
        await mkdir(join(host, "rw"));
        await chmod(join(host, "rw"), 0o777);
        await writeFile(join(host, "rw", "roots"), "root's file\n", { mode: 0o644 });
        await chown(join(host, "rw", "roots"), 0, 0);
      });

      it("holds only its eight file capabilities: no CAP_SYS_ADMIN, no mount, no namespace, no device node", async () => {
        const out = await jailed(sandbox, [
          "python3",
          "-c",
          `${TRY}
print("uid:", os.getuid())
print("caps:", [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0])
attempt("mount-tmpfs", syscall("mount", 165, b"none", b"/mnt", b"tmpfs", 0, None))
attempt("remount-root", syscall("mount", 165, None, b"/", None, 32 | 1, None))
attempt("unshare-user", syscall("unshare", 272, 0x10000000))
attempt("unshare-mount", syscall("unshare", 272, 0x00020000))
attempt("mknod-mem", lambda: os.mknod("/tmp/mem", 0o600 | 0o020000, os.makedev(1, 1)))
attempt("mknod-in-image", lambda: os.mknod("/dev-mem", 0o600 | 0o020000, os.makedev(1, 1)))
`,
        ], { projectId: PROJECT, image: { root: copy, writable: true } });
        assert.equal(out.code, 0, out.stderr);
        const got = outcomes(out.stdout);
        assert.equal(got.uid, "0");
        // CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, FSETID, KILL, SETGID, SETUID: bits 0–7, nothing else.
        assert.equal(BigInt(`0x${got.caps}`), 0xffn);
        for (
          const name of ["mount-tmpfs", "remount-root", "unshare-user", "unshare-mount", "mknod-mem", "mknod-in-image"]
        ) {
          assert.equal(got[name], "EPERM", `${name}: ${got[name]}`);
        }
      });

      it("its root has no power over host files bound in: a 0600 file of root's stays unreadable, root's files unchanged", async () => {
        const secret = join(host, "root-only");
        const roots = join(host, "rw", "roots");
        const out = await jailed(sandbox, [
          "python3",
          "-c",
          `${TRY}
attempt("read-root-only", lambda: open(${JSON.stringify(secret)}).read())
attempt("write-roots", lambda: open(${JSON.stringify(roots)}, "a").write("pwned") and None)
attempt("chown-roots", lambda: os.chown(${JSON.stringify(roots)}, 0, 0))
attempt("chmod-roots", lambda: os.chmod(${JSON.stringify(roots)}, 0o666))
attempt("read-shared-root", lambda: os.listdir(${JSON.stringify(root)}))
`,
        ], {
          projectId: PROJECT,
          image: { root: copy, writable: true },
          readOnly: [secret],
          writable: [join(host, "rw")],
        });
        assert.equal(out.code, 0, out.stderr);
        // Real root (CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER on the host) would do each of these.
        assert.deepEqual(outcomes(out.stdout), {
          "read-root-only": "EACCES",
          "write-roots": "EACCES",
          "chown-roots": "EPERM",
          "chmod-roots": "EPERM",
          // The read-only root replicas share is nowhere in its view.
          "read-shared-root": "ENOENT",
        });
        assert.equal(await readFile(roots, "utf8"), "root's file\n");
      });

      it("what it makes, setuid bits included, is the principal's on the host, never root's", async () => {
        const out = await jailed(sandbox, [
          "sh",
          "-c",
          "cp /usr/bin/id /usr/local/bin/made-suid && chown 0:0 /usr/local/bin/made-suid && chmod 4755 /usr/local/bin/made-suid && touch /made",
        ], { projectId: PROJECT, image: { root: copy, writable: true } });
        assert.equal(out.code, 0, out.stderr);
        const { stdout } = await run("stat", [
          "-c",
          "%u %a",
          join(copy, "usr/local/bin/made-suid"),
          join(copy, "made"),
        ]);
        const owner = serverUidFor();
        assert.deepEqual(stdout.trim().split("\n"), [`${owner} 4755`, `${owner} 644`]);
        assert.notEqual(owner, 0);
      });

      it("sees no host process and signals none, despite CAP_KILL in its namespace", async () => {
        const victim = startVictim();
        try {
          await new Promise((resolve) => setTimeout(resolve, 200));
          const out = await jailed(sandbox, ["python3", "-c", SIGNALS(victim.pid!)], {
            projectId: PROJECT,
            image: { root: copy, writable: true },
          });
          assert.equal(out.code, 0, out.stderr);
          const seen = outcomes(out.stdout);
          assert.equal(seen["victim-visible"], "no");
          assert.equal(seen["kill-victim"], "ESRCH");
          assert.equal(victim.signalCode, null, "the host process was killed from the build step");
        } finally {
          victim.kill("SIGKILL");
        }
      });

      it("with egress on, reaches no host or private address (its namespace cannot lift the routes)", async () => {
        const targets: Array<[string, string, number]> = [
          ["slirp-host", "10.0.2.2", hostPort],
          ["host-address", hostAddress(), hostPort],
          ["private", peer?.privateAddress ?? "10.1.2.3", peer?.port ?? 9],
          ["link-local", "169.254.169.254", 80],
        ];
        const code = `${TRY}
${
          targets.map(([name, address, port]) =>
            `attempt("${name}", lambda: socket.create_connection(("${address}", ${port}), timeout=3) and None)`
          ).join("\n")
        }
`;
        const out = await jailed(sandbox, ["python3", "-c", code], {
          projectId: PROJECT,
          egress: true,
          image: { root: copy, writable: true },
        });
        assert.equal(out.code, 0, out.stderr);
        for (const [name, outcome] of Object.entries(outcomes(out.stdout))) {
          assert.match(outcome, /^E[A-Z]+$/, `${name}: ${outcome}`);
        }
        assert.equal(hostConnections, 0);
      });

      it("links it leaves in its copy lead no later step, nor the read-only use of that root, outside it", async () => {
        // While bubblewrap sets a jail up, its own root is a tmpfs holding the host's / at /oldroot and the new
        // root at /newroot: links to /oldroot/... (or ../oldroot/...) in the copy would name host paths then.
        const bound = join(host, "rw");
        for (const name of ["absolute", "relative"]) {
          const target = (folder: string) => {
            const up = name === "absolute" ? "/" : "../".repeat(folder.split("/").filter(Boolean).length);
            return `${up}oldroot${victimDir}${folder === "/home" ? "" : `/${name}-bound`}`;
          };
          const at = (folder: string) => `mv ${folder} ${folder}.${name} && ln -s ${target(folder)} ${folder}`;
          const plant = `${at("/home")} && mkdir -p ${host} && ${at(host)}`;
          const first = await jailed(sandbox, ["sh", "-c", plant], {
            projectId: PROJECT,
            image: { root: copy, writable: true },
          });
          assert.equal(first.code, 0, first.stderr);
          // The next step's mount points (HOME, a bind below the linked folder) would be made by bubblewrap in its
          // own view, where these links name host paths (it made /home/runplane in the host's folder before the
          // fix): the step is refused before it starts.
          assert.throws(() =>
            sandbox.spawn("true", [], {
              jail: {
                projectId: PROJECT,
                cwd: "/",
                egress: true,
                env: {},
                image: { root: copy, writable: true },
                writable: [bound],
              },
              stdio: ["ignore", "ignore", "ignore"],
            }), /The build root's \/home is a link/);
          assert.deepEqual(await readdir(victimDir), [], `${name}: something was made through the link`);
          // Only the bind's folder linked: refused as well.
          await unlink(join(copy, "home"));
          await rename(join(copy, `home.${name}`), join(copy, "home"));
          assert.throws(() =>
            sandbox.spawn("true", [], {
              jail: {
                projectId: PROJECT,
                cwd: "/",
                egress: false,
                env: {},
                image: { root: copy, writable: true },
                writable: [bound],
              },
              stdio: ["ignore", "ignore", "ignore"],
            }), /The build root's \/var\/tmp\/.*\/host is a link/);
          assert.deepEqual(await readdir(victimDir), []);
          // Put back on the host (the test's own copy) for the next round: the links themselves, never followed.
          await unlink(join(copy, host));
          await rename(join(copy, `${host}.${name}`), join(copy, host));
        }
        assert.throws(() =>
          sandbox.spawn("true", [], {
            jail: { projectId: PROJECT, cwd: "/", egress: false, env: {}, image: { root: copy } },
            stdio: ["ignore", "ignore", "ignore"],
          }), /was used writable/);
      });
    });
  });
}

/** The uid that owns what a build step makes: the principal's on a root server, the server's otherwise. */
function serverUidFor(): number {
  return principalUid();
}

/** One of the host's own addresses (not loopback): a jail with egress must not reach it. */
function hostAddress(): string {
  const found = Object.values(networkInterfaces()).flat().find((a) => a && a.family === "IPv4" && !a.internal);
  return found?.address ?? "192.0.2.2";
}

/**
 * A copy of the image `root` carrying an attacker's files: a setuid-root `id`, a `python3` with file
 * capabilities, a world-writable file and folder, an `/etc/ld.so.preload` naming a library (built here)
 * that marks each process it loads into, the same library at the path of setpriv's `libcap-ng.so.0`, and an
 * `/usr/bin/setpriv` of its own that marks a run.
 */
async function makeEvilImage(root: string, options: { dir: string; markers: string }): Promise<string> {
  const evil = join(options.dir, "evil");
  await run("cp", ["-a", "--", root, evil]);
  const bin = join(evil, "usr", "local", "bin");
  await run("cp", ["--", join(evil, "usr", "bin", "id"), join(bin, "suid-id")]);
  await chown(join(bin, "suid-id"), 0, 0);
  await chmod(join(bin, "suid-id"), 0o4755);
  const python = (await run("readlink", ["-f", "--", join(evil, "usr", "bin", "python3")])).stdout.trim();
  await run("cp", ["--", python, join(bin, "cap-python")]);
  await run("setcap", ["cap_setuid,cap_dac_override,cap_sys_admin+ep", join(bin, "cap-python")]);
  assert.match((await run("getcap", [join(bin, "cap-python")])).stdout, /cap_setuid/);
  await writeFile(join(evil, "usr", "share", "runplane-shared.txt"), "shared\n", { mode: 0o666 });
  await chmod(join(evil, "usr", "share", "runplane-shared.txt"), 0o666);
  await mkdir(join(evil, "opt", "shared"), { recursive: true });
  await chmod(join(evil, "opt", "shared"), 0o777);
  await writeFile(join(evil, "opt", "shared", "kept"), "kept\n");
  const source = join(options.dir, "planted.c");
  await writeFile(source, PLANTED_C);
  const library = join(evil, "usr", "lib", "runplane-planted.so");
  await run("gcc", ["-shared", "-fPIC", "-O2", `-DMARKERS="${options.markers}"`, "-o", library, source]);
  await writeFile(join(evil, "etc", "ld.so.preload"), "/usr/lib/runplane-planted.so\n");
  // setpriv's own library, in the image's folder: a loader that searched the image's folders would load it.
  const libdir = join(evil, "usr", "lib", "x86_64-linux-gnu");
  await rm(join(libdir, "libcap-ng.so.0"), { force: true });
  await run("cp", ["--", library, join(libdir, "libcap-ng.so.0")]);
  await writeFile(
    join(evil, "usr", "bin", "setpriv"),
    `#!/bin/sh\ntouch "${options.markers}/setpriv-ran-$(id -u)"\nexec "$@"\n`,
    { mode: 0o755 },
  );
  await chmod(join(evil, "usr", "bin", "setpriv"), 0o755);
  return evil;
}
