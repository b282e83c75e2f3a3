/**
 * `JailSpec.mounts` (project volumes, issue 48): a host folder shown at a target of its own, writable or
 * read-only, nosuid and nodev; its source opened without following a link, so a folder swapped for a link
 * to a host folder is refused rather than shown; its target never over a folder the jail shows itself.
 */
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { createSandbox, type Sandbox } from "../../server/sandbox/mod.ts";
import { bubblewrapArgs } from "../../server/sandbox/_policy.ts";
import { runJailed, sandboxWorks } from "../_helpers/sandbox.ts";

const FILES = { passwd: "/p", group: "/g", hosts: "/h", resolvConf: "/r" };

describe("jail mounts: the arguments", () => {
  it("binds each mount at its target, by descriptor when the spawner opened it, before the host-path binds", () => {
    const args = bubblewrapArgs(
      {
        projectId: "p",
        cwd: "/",
        egress: false,
        env: {},
        readOnly: ["/srv/app"],
        mounts: [
          { source: "/vol/a/files", target: "/models/a", readOnly: false },
          { source: "/vol/b/files", target: "/data", readOnly: true },
        ],
      },
      { identity: { kind: "user" }, files: FILES, fds: {}, bindFds: new Map([["/vol/a/files", 7]]) },
    );
    const text = args.join(" ");
    assert.match(text, /--perms 0755 --dir \/models --bind-fd 7 \/models\/a/);
    assert.match(text, /--ro-bind \/vol\/b\/files \/data/);
    assert.ok(text.indexOf("/models/a") < text.indexOf("--ro-bind /srv/app /srv/app"));
  });
});

describe("jail mounts: a real jail", async () => {
  const works = await sandboxWorks("the jail mount tests");
  let sandbox: Sandbox;
  let dir: string;
  before(async () => {
    if (!works) return;
    sandbox = await createSandbox("required", { logger: createLogger({ level: "silent" }) });
    dir = await mkdtemp(join(tmpdir(), "runplane-mounts-"));
    await chmod(dir, 0o755);
    await mkdir(join(dir, "files"), { mode: 0o777 });
    await chmod(join(dir, "files"), 0o777);
    await writeFile(join(dir, "files", "in.txt"), "inside");
    await mkdir(join(dir, "secret"));
    await writeFile(join(dir, "secret", "host.txt"), "host");
    await symlink(join(dir, "secret"), join(dir, "swapped"));
  });
  after(async () => {
    sandbox?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("shows the folder at its target, writable, nosuid and nodev", { skip: !works }, async () => {
    const out = await runJailed(sandbox, [
      "python3",
      "-c",
      "print(open('/models/in.txt').read()); open('/models/out.txt','w').write('out');"
      + "print([l.split(' ')[5] for l in open('/proc/self/mountinfo') if l.split(' ')[4] == '/models'][0])",
    ], { projectId: "p-mounts", mounts: [{ source: join(dir, "files"), target: "/models", readOnly: false }] });
    assert.equal(out.code, 0, out.stderr);
    const [text, options] = out.stdout.trim().split("\n");
    assert.equal(text, "inside");
    assert.match(options!, /nosuid/);
    assert.match(options!, /nodev/);
    assert.equal(await readFile(join(dir, "files", "out.txt"), "utf8"), "out");
  });

  it("a read-only mount refuses writes with EROFS", { skip: !works }, async () => {
    const out = await runJailed(sandbox, [
      "python3",
      "-c",
      "import errno\ntry:\n    open('/data/x','w')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])",
    ], { projectId: "p-mounts", mounts: [{ source: join(dir, "files"), target: "/data", readOnly: true }] });
    assert.equal(out.stdout.trim(), "EROFS", out.stderr);
  });

  it("a source that is a link (a folder swapped for a link to a host folder) is refused, not followed", {
    skip: !works,
  }, () => {
    assert.throws(
      () =>
        sandbox.spawn("true", [], {
          jail: {
            projectId: "p-mounts",
            cwd: "/",
            egress: false,
            env: {},
            mounts: [{ source: join(dir, "swapped"), target: "/models", readOnly: false }],
          },
          stdio: ["ignore", "ignore", "ignore"],
        }),
      /ENOTDIR|ELOOP/,
    );
  });
});
