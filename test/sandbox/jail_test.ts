/**
 * The jail itself, process by process: what `_policy.ts` and `_seccomp.py` promise, tried from inside a
 * real bubblewrap sandbox.
 */
import assert from "node:assert/strict";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { createSandbox, type JailSpec, type Sandbox } from "../../server/sandbox/mod.ts";
import { runJailed, sandboxWorks } from "../_helpers/sandbox.ts";

/** Runs Python `code` jailed by `spec`; resolves with its exit code, stdout and stderr. */
function jailed(sandbox: Sandbox, code: string, spec: Partial<JailSpec> = {}) {
  return runJailed(sandbox, ["python3", "-c", code], { projectId: "p-jail", ...spec });
}

/** Each line of `code`'s output as `name: outcome`, where the outcome is `ok` or the error's name. */
const TRY = `
import errno, os, sys
def attempt(name, fn):
    try:
        fn()
        print(f"{name}: ok")
    except OSError as e:
        print(f"{name}: {errno.errorcode.get(e.errno, e.errno)}")
`;

function outcomes(stdout: string): Record<string, string> {
  return Object.fromEntries(stdout.trim().split("\n").map((line) => line.split(": ") as [string, string]));
}

if (await sandboxWorks("the jail tests")) {
  describe("the jail", () => {
    let sandbox: Sandbox;
    let dir: string;
    before(async () => {
      sandbox = await createSandbox("required", { logger: createLogger({ level: "silent" }) });
      dir = await mkdtemp(join(tmpdir(), "runplane-jail-"));
      // mkdtemp makes it 0700: a root server's jailed processes run as another uid, which must read it.
      await chmod(dir, 0o755);
      await writeFile(join(dir, "app.txt"), "app");
    });
    after(async () => {
      sandbox?.close();
      await rm(dir, { recursive: true, force: true });
    });

    it("starts from an empty environment: the basics and the spec's own variables", async () => {
      const out = await jailed(sandbox, "import os, json; print(json.dumps(dict(os.environ)))", {
        env: { MY_SETTING: "1" },
      });
      assert.equal(out.code, 0, out.stderr);
      const env = JSON.parse(out.stdout) as Record<string, string>;
      assert.deepEqual(
        Object.keys(env).filter((k) => k !== "PWD" && k !== "LC_CTYPE").sort(),
        ["HOME", "LANG", "LOGNAME", "MY_SETTING", "PATH", "TMPDIR", "TZ", "USER"],
      );
    });

    it("has no capability, no new privileges, a seccomp filter and (as root) an unprivileged uid", async () => {
      const out = await jailed(
        sandbox,
        "import os; print(open('/proc/self/status').read()); print('uid', os.getuid())",
      );
      assert.equal(out.code, 0, out.stderr);
      for (const field of ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]) {
        assert.match(out.stdout, new RegExp(`^${field}:\\s+0+$`, "m"), field);
      }
      assert.match(out.stdout, /^NoNewPrivs:\s+1$/m);
      assert.match(out.stdout, /^Seccomp:\s+2$/m);
      if (process.getuid?.() === 0) assert.doesNotMatch(out.stdout, /^uid 0$/m);
    });

    it("refuses namespaces, mounts, ptrace, the keyring, bpf, perf events, io_uring and raw sockets", async () => {
      const out = await jailed(
        sandbox,
        `${TRY}
import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
def syscall(name, number, *args):
    def call():
        if libc.syscall(number, *args) == -1:
            raise OSError(ctypes.get_errno(), name)
    return call
# x86-64 numbers; the test runs where the server runs
attempt("unshare-user", syscall("unshare", 272, 0x10000000))
attempt("unshare-net", syscall("unshare", 272, 0x40000000))
attempt("clone-newuser", syscall("clone", 56, 0x10000000 | 17, 0, 0, 0, 0))
attempt("mount", syscall("mount", 165, b"none", b"/tmp", b"tmpfs", 0, 0))
attempt("ptrace", syscall("ptrace", 101, 16, 1, 0, 0))
attempt("keyctl", syscall("keyctl", 250, 0, 0, 0, 0, 0))
attempt("bpf", syscall("bpf", 321, 0, 0, 0))
attempt("perf_event_open", syscall("perf_event_open", 298, 0, 0, -1, -1, 0))
attempt("io_uring_setup", syscall("io_uring_setup", 425, 1, 0))
attempt("clone3", syscall("clone3", 435, 0, 0))
attempt("packet-socket", lambda: socket.socket(17, socket.SOCK_RAW))
attempt("tiocsti", syscall("ioctl", 16, 0, 0x5412, ctypes.byref(ctypes.c_char(b"x"))))
`,
      );
      assert.equal(out.code, 0, out.stderr);
      assert.deepEqual(outcomes(out.stdout), {
        "unshare-user": "EPERM",
        "unshare-net": "EPERM",
        "clone-newuser": "EPERM",
        mount: "EPERM",
        ptrace: "EPERM",
        keyctl: "EPERM",
        bpf: "EPERM",
        perf_event_open: "EPERM",
        io_uring_setup: "ENOSYS",
        clone3: "ENOSYS",
        "packet-socket": "EAFNOSUPPORT",
        tiocsti: "EPERM",
      });
    });

    it("sees the system read-only, its own folders as bound, a private /tmp and HOME, and its own processes only", async () => {
      const out = await jailed(
        sandbox,
        `${TRY}
attempt("write-usr", lambda: open("/usr/runplane-test", "w"))
attempt("write-etc", lambda: open("/etc/runplane-test", "w"))
attempt("read-app", lambda: open(${JSON.stringify(join(dir, "app.txt"))}).read())
attempt("write-app", lambda: open(${JSON.stringify(join(dir, "new.txt"))}, "w"))
attempt("write-tmp", lambda: open("/tmp/x", "w"))
attempt("write-home", lambda: open(os.path.expanduser("~/x"), "w"))
attempt("read-shadow", lambda: open("/etc/shadow").read())
attempt("read-root", lambda: os.listdir("/root"))
print("processes:", len([p for p in os.listdir("/proc") if p.isdigit()]) < 5 and "few" or "many")
`,
        { readOnly: [dir] },
      );
      assert.equal(out.code, 0, out.stderr);
      assert.deepEqual(outcomes(out.stdout), {
        "write-usr": "EROFS",
        // /etc is the jail's own folder (its files are bound read-only), writable by nobody inside.
        "write-etc": process.getuid?.() === 0 ? "EACCES" : "EROFS",
        "read-app": "ok",
        "write-app": "EROFS",
        "write-tmp": "ok",
        "write-home": "ok",
        "read-shadow": "ENOENT",
        "read-root": "ENOENT",
        processes: "few",
      });
    });

    it("without egress has no route out; with egress reaches no private, link-local or host address", async () => {
      const code = `${TRY}
import socket
def connect(host):
    return lambda: socket.create_connection((host, 9), timeout=2)
attempt("private", connect("10.1.2.3"))
attempt("link-local", connect("169.254.169.254"))
attempt("shared", connect("100.64.0.1"))
attempt("host-loopback", connect("10.0.2.2"))
`;
      const closed = await jailed(sandbox, code, { egress: false });
      assert.equal(closed.code, 0, closed.stderr);
      assert.deepEqual(new Set(Object.values(outcomes(closed.stdout))), new Set(["ENETUNREACH"]));
      const open = await jailed(sandbox, code, { egress: true });
      assert.equal(open.code, 0, open.stderr);
      const refused = outcomes(open.stdout);
      assert.equal(refused.private, "EACCES");
      assert.equal(refused["link-local"], "EACCES");
      assert.equal(refused.shared, "EACCES");
      assert.notEqual(refused["host-loopback"], "ok");
    });
  });
}
