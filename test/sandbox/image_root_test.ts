/**
 * A jail whose `/` is an unpacked image (issue 46), tried for real: the test base image (Debian trixie with
 * python3, on a bookworm host) unpacked by umoci, run read-only as a replica and writable as a build step.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, lstat, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { createSandbox, type JailSpec, type Sandbox } from "../../server/sandbox/mod.ts";
import { identityFor } from "../../server/sandbox/_identity.ts";
import { imageToolsWork, unpackTestImage } from "../_helpers/images.ts";
import { runJailed, sandboxWorks } from "../_helpers/sandbox.ts";

const run = promisify(execFile);

/** Runs `command` jailed by `spec`; resolves with its exit code, stdout and stderr. */
function jailed(sandbox: Sandbox, command: string[], spec: Partial<JailSpec>) {
  return runJailed(sandbox, command, { projectId: "p-image", ...spec });
}

async function debianReachable(): Promise<boolean> {
  try {
    return (await fetch("http://deb.debian.org/debian/dists/trixie/Release", { signal: AbortSignal.timeout(5000) })).ok;
  } catch {
    return false;
  }
}

const READ_ONLY_PROBE = `
import os, errno
def attempt(name, fn):
    try:
        fn(); print(f"{name}: ok")
    except OSError as e:
        print(f"{name}: {errno.errorcode.get(e.errno, e.errno)}")
print("uid:", os.getuid())
status = open("/proc/self/status").read()
print("caps:", ",".join(l.split()[1] for l in status.splitlines() if l.startswith(("CapEff", "CapBnd", "CapPrm"))))
attempt("write /", lambda: open("/new", "w"))
attempt("write /usr", lambda: open("/usr/new", "w"))
attempt("write /etc", lambda: open("/etc/new", "w"))
attempt("write /tmp", lambda: open("/tmp/new", "w").write("x"))
attempt("write HOME", lambda: open(os.environ["HOME"] + "/new", "w").write("x"))
attempt("write bound", lambda: open(os.environ["BOUND_RW"] + "/new", "w").write("x"))
attempt("write read-only bound", lambda: open(os.environ["BOUND_RO"], "a"))
print("bound:", open(os.environ["BOUND_RO"]).read())
print("debian_version:", open("/etc/debian_version").read().strip())
print("host /root:", os.path.exists("/root/.bashrc") or os.path.exists("/root/.npm"))
print("host /work:", os.path.exists("/work"))
import socket
attempt("connect", lambda: socket.create_connection(("1.1.1.1", 80), timeout=3))
`;

if (await imageToolsWork("the image root jail tests") && await sandboxWorks("the image root jail tests")) {
  describe("a jail whose / is an image", () => {
    let sandbox: Sandbox;
    let dir: string;
    let root: string;
    before(async () => {
      sandbox = await createSandbox("required", { logger: createLogger({ level: "silent" }) });
      dir = await mkdtemp(join(tmpdir(), "runplane-image-root-"));
      await chmod(dir, 0o755);
      root = join(dir, "root");
      await unpackTestImage(root);
      await mkdir(join(dir, "data", "rw"), { recursive: true, mode: 0o777 });
      await chmod(join(dir, "data", "rw"), 0o777);
      await writeFile(join(dir, "data", "app.txt"), "from the host");
      await chmod(join(dir, "data", "app.txt"), 0o666); // writable but for the read-only bind
    });
    after(async () => {
      sandbox?.close();
      if (dir?.startsWith(join(tmpdir(), "runplane-image-root-"))) await rm(dir, { recursive: true, force: true });
    });

    it("runs the image's system and python, not the host's", async () => {
      const out = await jailed(sandbox, ["sh", "-c", "grep VERSION_CODENAME /etc/os-release; python3 --version"], {
        image: { root },
      });
      assert.equal(out.code, 0, out.stderr);
      assert.match(out.stdout, /VERSION_CODENAME=trixie/);
      assert.match(out.stdout, /Python 3\.13\./);
    });

    it("keeps the jail: project uid, no capability, / read-only, /tmp and HOME writable, binds at host paths, no network", async () => {
      const ro = join(dir, "data", "app.txt");
      const rw = join(dir, "data", "rw");
      const out = await jailed(sandbox, ["python3", "-c", READ_ONLY_PROBE], {
        image: { root },
        readOnly: [ro],
        writable: [rw],
        env: { BOUND_RO: ro, BOUND_RW: rw },
      });
      assert.equal(out.code, 0, out.stderr);
      const identity = identityFor("p-image");
      const uid = identity.kind === "root" ? identity.uid : 1000;
      assert.match(out.stdout, new RegExp(`^uid: ${uid}$`, "m"));
      assert.match(out.stdout, /^caps: 0+,0+,0+$/m);
      for (const place of ["/", "/usr", "/etc"]) assert.match(out.stdout, new RegExp(`^write ${place}: EROFS$`, "m"));
      assert.match(out.stdout, /^write \/tmp: ok$/m);
      assert.match(out.stdout, /^write HOME: ok$/m);
      assert.match(out.stdout, /^write bound: ok$/m);
      assert.match(out.stdout, /^write read-only bound: EROFS$/m);
      assert.match(out.stdout, /^bound: from the host$/m);
      assert.match(out.stdout, /^debian_version: 13/m);
      assert.match(out.stdout, /^host \/root: False$/m);
      assert.match(out.stdout, /^host \/work: False$/m);
      assert.match(out.stdout, /^connect: E(NETUNREACH|HOSTUNREACH|ACCES)$/m);
      assert.equal(await readFile(join(rw, "new"), "utf8"), "x");
    });

    it("shows the image's own /etc/shadow (unreadable), never the host's", async () => {
      const out = await jailed(sandbox, ["sh", "-c", "cat /etc/shadow; echo rc=$?"], { image: { root } });
      assert.match(out.stdout, /rc=1/);
      assert.doesNotMatch(out.stdout, /root:/);
    });

    it("reaches a bind below an image folder others may not search, showing nothing of that folder", async () => {
      // As a server checked out in /root/… binds its worker below an image's /root (0700).
      const closed = join(dir, "closed-root");
      await run("cp", ["-a", "--", root, closed]);
      await writeFile(join(closed, "var", "tmp", "image-secret"), "the image's own");
      await chmod(join(closed, "var", "tmp"), 0o700);
      const host = await mkdtemp("/var/tmp/runplane-image-bind-");
      try {
        await chmod(host, 0o755);
        await writeFile(join(host, "app.txt"), "from the host");
        await chmod(join(host, "app.txt"), 0o644);
        const out = await jailed(sandbox, ["sh", "-c", `cat ${host}/app.txt; echo; ls -A /var/tmp; touch /var/tmp/x`], {
          image: { root: closed },
          readOnly: [join(host, "app.txt")],
        });
        assert.match(out.stdout, /^from the host$/m, out.stderr);
        assert.doesNotMatch(out.stdout, /image-secret/, "the folder is covered, not shown");
        assert.match(out.stderr, /Read-only file system/, "the cover is read-only");
      } finally {
        await rm(host, { recursive: true, force: true });
      }
    });

    it("refuses an image whose /etc is a link to /, writing nothing outside it", async () => {
      const evil = join(dir, "evil");
      await mkdir(join(evil, "usr", "bin"), { recursive: true });
      await symlink("/", join(evil, "etc"));
      await mkdir(join(evil, "home"));
      const before = await readdir("/");
      assert.throws(() =>
        sandbox.spawn("true", [], {
          jail: { projectId: "p-image", cwd: "/", egress: false, env: {}, image: { root: evil } },
          stdio: ["ignore", "ignore", "ignore"],
        }), /The image's \/etc is a link \(to \/\)/);
      assert.deepEqual(await readdir("/"), before);
      assert.equal(await lstat("/passwd").then(() => true, () => false), false);
      assert.deepEqual((await readdir(evil)).sort(), ["etc", "home", "usr"]);
      // A /home that is a file is refused as well.
      const other = join(dir, "other");
      await mkdir(join(other, "etc"), { recursive: true });
      await writeFile(join(other, "home"), "");
      assert.throws(() =>
        sandbox.spawn("true", [], {
          jail: { projectId: "p-image", cwd: "/", egress: false, env: {}, image: { root: other } },
          stdio: ["ignore", "ignore", "ignore"],
        }), /The image's \/home is not a folder/);
    });

    describe("writable, for a build step that is root", () => {
      let copy: string;
      before(async () => {
        copy = join(dir, "build-root");
        await run("cp", ["-a", "--", root, copy]);
        const identity = identityFor("p-build");
        if (identity.kind === "root") await run("chown", ["-hR", `${identity.uid}:${identity.gid}`, "--", copy]);
      });

      it("is uid 0 inside, owns its files on the host as the principal, and runs dpkg", async () => {
        const out = await jailed(sandbox, [
          "sh",
          "-c",
          "id -u; grep CapEff /proc/self/status; touch /made-by-step && touch /usr/local/bin/tool && dpkg --version | head -1",
        ], { projectId: "p-build", image: { root: copy, writable: true } });
        assert.equal(out.code, 0, out.stderr);
        assert.match(out.stdout, /^0$/m);
        assert.match(out.stdout, /dpkg/);
        // CAP_NET_ADMIN (bit 12) and CAP_SYS_ADMIN (bit 21) are not among its capabilities.
        const eff = BigInt(`0x${/CapEff:\s+(\w+)/.exec(out.stdout)![1]}`);
        assert.equal(eff & (1n << 12n), 0n);
        assert.equal(eff & (1n << 21n), 0n);
        const identity = identityFor("p-build");
        const owner = identity.kind === "root" ? identity.uid : process.getuid!();
        assert.equal((await lstat(join(copy, "made-by-step"))).uid, owner);
        assert.equal((await lstat(join(copy, "usr", "local", "bin", "tool"))).uid, owner);
      });

      it("installs a package with apt from deb.debian.org (needs the network)", async (t) => {
        if (!await debianReachable()) {
          console.error(
            "\n*** SKIPPED apt-get install in a writable image root: deb.debian.org is unreachable from here.\n",
          );
          t.skip("deb.debian.org is unreachable");
          return;
        }
        const apt = "apt-get -q -o APT::Sandbox::User=root";
        const out = await jailed(sandbox, [
          "sh",
          "-c",
          `${apt} update && ${apt} install -y --no-install-recommends jq && jq --version`,
        ], { projectId: "p-build", egress: true, image: { root: copy, writable: true } });
        assert.equal(out.code, 0, `${out.stdout}\n${out.stderr}`);
        assert.match(out.stdout, /jq-1\./);
      });
    });
  });
}
