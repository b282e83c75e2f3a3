/**
 * Loop-mounted volumes (`RUNPLANE_VOLUMES_MODE=loop`, the default of a root server), on both engines: a
 * volume is an ext4 image mounted on its folder; an upload past its size fails with ENOSPC in that file
 * system and is answered 413, its temporary removed, the volume still usable; a link into another
 * project's mounted volume is never followed; deleting a volume unmounts it and removes its image. Needs
 * root and loop devices: skipped loudly without them, failed under RUNPLANE_TEST_REQUIRE_SANDBOX=1. Every
 * mount made here is unmounted in `after`.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { checkedFetch } from "../_helpers/contract.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { isMountPoint, unmountUnder, volumePaths } from "../../server/volumes/mod.ts";

const MIB = 1024 * 1024;
const REQUIRED = process.env.RUNPLANE_TEST_REQUIRE_SANDBOX === "1";

/** Whether this process can make and loop-mount an ext4 image; else says so loudly (or throws in CI). */
function loopMountsWork(): boolean {
  let problem: string | undefined;
  if (process.getuid?.() !== 0) problem = "the tests do not run as root";
  else {
    const dir = mkdtempSync(join(tmpdir(), "runplane-loop-probe-"));
    try {
      execFileSync("truncate", ["-s", "16M", join(dir, "probe.ext4")]);
      execFileSync("mkfs.ext4", ["-q", "-F", join(dir, "probe.ext4")], { stdio: "ignore" });
      execFileSync("mkdir", [join(dir, "m")]);
      execFileSync("mount", ["-o", "loop", join(dir, "probe.ext4"), join(dir, "m")], { stdio: "ignore" });
      execFileSync("umount", [join(dir, "m")]);
    } catch (error) {
      problem = `a loop mount failed here (${(error as Error).message.split("\n")[0]})`;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  if (problem === undefined) return true;
  if (REQUIRED) throw new Error(`loop-mounted volumes: ${problem}, and RUNPLANE_TEST_REQUIRE_SANDBOX=1 requires them`);
  console.error(
    `\n*** SKIPPED loop-mounted volumes: ${problem}.\n*** Run as root with loop devices (mount -o loop); RUNPLANE_TEST_REQUIRE_SANDBOX=1 fails instead of skipping.\n`,
  );
  return false;
}

const works = loopMountsWork();

for (const engine of await engines()) {
  describe(`loop-mounted volumes (${engine})`, { skip: !works }, () => {
    let t: TestServer;
    let deploy: string;
    let other: string;
    const base = `/v3/projects/${TEST_PROJECT}/volumes`;

    before(async () => {
      t = await startTestServer({ engine, env: { RUNPLANE_VOLUMES_MODE: "loop" } });
      deploy = (await t.mintToken({ scopes: ["deploy", "rest"] })).token;
      other = (await t.mintToken({ projectId: "p-other", scopes: ["deploy", "rest"] })).token;
    });
    after(async () => {
      if (t) await unmountUnder(t.server.context.volumes.dir);
      await t?.close();
    });

    function request(method: string, url: string, options: { token?: string; json?: unknown; body?: unknown } = {}) {
      const headers: Record<string, string> = { Authorization: `Bearer ${options.token ?? deploy}` };
      if (options.json !== undefined) headers["Content-Type"] = "application/json";
      if (options.body !== undefined) headers["Content-Type"] = "application/octet-stream";
      return checkedFetch(`${t.url}${url}`, {
        method,
        headers,
        body: (options.json !== undefined ? JSON.stringify(options.json) : options.body) as BodyInit | undefined,
        ...(options.body !== undefined
            && typeof (options.body as AsyncIterable<unknown>)[Symbol.asyncIterator] === "function"
          ? { duplex: "half" }
          : {}),
      } as RequestInit);
    }

    function paths(name: string, project = TEST_PROJECT) {
      return volumePaths(t.server.context.volumes.dir, { projectId: project, name });
    }

    it("makes a sparse ext4 image, mounted on the volume's folder", async () => {
      assert.equal(t.server.context.volumes.mode, "loop");
      const made = await request("PUT", `${base}/weights`, { json: { size_gb: 0.0625 } });
      assert.equal(made.status, 201);
      const volume = (await made.json()) as { size_bytes: number; used_bytes: number };
      assert.equal(volume.size_bytes, 64 * MIB);
      const p = paths("weights");
      assert.ok(isMountPoint(p.root), "mounted");
      assert.equal(statSync(p.image).size, 64 * MIB);
      assert.ok(statSync(p.image).blocks * 512 < 32 * MIB, "sparse: takes disk as it fills");
      const fsType = execFileSync("findmnt", ["-n", "-o", "FSTYPE", p.root], { encoding: "utf8" }).trim();
      assert.equal(fsType, "ext4");
      const device = execFileSync("findmnt", ["-n", "-o", "SOURCE", p.root], { encoding: "utf8" }).trim();
      const dio = readFileSync(`/sys/block/${device.replace("/dev/", "")}/loop/dio`, "utf8").trim();
      assert.equal(dio, "1", "its loop device does direct I/O: the image's writes are not cached twice");
    });

    it("answers 413 at ENOSPC (no Content-Length to refuse up front), removes the temporary, and stays usable", async () => {
      const chunks = async function*() {
        for (let i = 0; i < 80; i++) yield new Uint8Array(MIB).fill(i);
      };
      const refused = await request("PUT", `${base}/weights/files/too-big.bin`, { body: chunks() });
      assert.equal(refused.status, 413);
      const files = paths("weights").files;
      assert.deepEqual(readdirSync(files), []);
      const fits = await request("PUT", `${base}/weights/files/fits.bin`, { body: new Uint8Array(20 * MIB).fill(7) });
      assert.equal(fits.status, 201);
      assert.equal(statSync(join(files, "fits.bin")).size, 20 * MIB);
      const used = ((await (await request("GET", `${base}/weights`)).json()) as { used_bytes: number }).used_bytes;
      assert.ok(used >= 20 * MIB && used < 40 * MIB, String(used));
      // Declared too large: refused before a byte is written.
      const declared = await request("PUT", `${base}/weights/files/declared.bin`, { body: new Uint8Array(60 * MIB) });
      assert.equal(declared.status, 413);
      assert.deepEqual(readdirSync(files), ["fits.bin"]);
    });

    it("never follows a link into another project's mounted volume", async () => {
      assert.equal(
        (await request("PUT", "/v3/projects/p-other/volumes/private", { token: other, json: { size_gb: 0.0625 } }))
          .status,
        201,
      );
      const put = await request("PUT", "/v3/projects/p-other/volumes/private/files/secret.txt", {
        token: other,
        body: new TextEncoder().encode("theirs"),
      });
      assert.equal(put.status, 201);
      await symlink(paths("private", "p-other").files, join(paths("weights").files, "theirs"));
      for (const method of ["GET", "PUT", "DELETE"]) {
        const answer = await request(
          method,
          `${base}/weights/files/theirs/secret.txt`,
          method === "PUT" ? { body: new TextEncoder().encode("mine") } : {},
        );
        assert.equal(answer.status, 400, method);
      }
      assert.equal(readFileSync(join(paths("private", "p-other").files, "secret.txt"), "utf8"), "theirs");
    });

    it("removes the uploads a dead server left when it mounts the volume again, and nothing else", async () => {
      const p = paths("weights");
      // What a server killed mid-upload leaves: temporaries, which count against the volume's size.
      mkdirSync(join(p.files, "deep"), { recursive: true });
      writeFileSync(join(p.files, ".rp-upload-0123456789abcdef01234567"), Buffer.alloc(2 * MIB));
      writeFileSync(join(p.files, "deep", ".rp-upload-76543210fedcba9876543210"), Buffer.alloc(MIB));
      writeFileSync(join(p.files, "deep", "kept.bin"), "mine");
      execFileSync("umount", [p.root]); // the host restarted: the volume is not mounted any more
      const listed = await request("GET", `${base}/weights/files?prefix=deep/`);
      assert.equal(listed.status, 200);
      assert.ok(isMountPoint(p.root));
      assert.deepEqual(readdirSync(p.files).filter((name) => name.startsWith(".rp-upload-")), []);
      assert.deepEqual(readdirSync(join(p.files, "deep")), ["kept.bin"]);
    });

    it("unmounts a deleted volume and removes its image", async () => {
      const p = paths("weights");
      assert.equal((await request("DELETE", `${base}/weights`)).status, 204);
      assert.ok(!isMountPoint(p.root));
      assert.ok(!existsSync(p.image) && !existsSync(p.root));
      assert.equal((await request("DELETE", "/v3/projects/p-other/volumes/private", { token: other })).status, 204);
    });
  });
}
