import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { type Header as TarHeader, pack } from "tar-stream";
import { packBundle } from "../../client/bundle.ts";
import { bundleDigest, extractBundle } from "../../server/deployments/_bundle_extract.ts";
import { ProblemError } from "../../server/problems/mod.ts";

type Entry = Partial<TarHeader> & { name: string; text?: string };

/** A gzip tarball of `entries` exactly as given, hostile ones included. */
async function tarball(entries: Entry[]): Promise<Uint8Array> {
  const tar = pack();
  for (const { text, ...header } of entries) {
    if (header.type && header.type !== "file") tar.entry(header);
    else tar.entry(header, text ?? "");
  }
  tar.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of tar) chunks.push(chunk as Buffer);
  return new Uint8Array(gzipSync(Buffer.concat(chunks)));
}

/**
 * A gzip bomb: one entry declaring `declared` bytes of zeros. gzip members may be concatenated (RFC 1952),
 * so it is the tar header's member followed by one member of 64 MiB of zeros (about 64 KB) repeated:
 * 10 GB of zeros in about 10 MB, made in milliseconds.
 */
async function gzipBomb(declared: number): Promise<Uint8Array> {
  const header = pack();
  const headerBytes = new Promise<Buffer>((resolve) => header.once("data", (chunk) => resolve(chunk as Buffer)));
  header.entry({ name: "zeros.bin", size: declared });
  const block = 64 * 1024 * 1024;
  const zeros = gzipSync(Buffer.alloc(block), { level: 9 });
  const members = [gzipSync(await headerBytes), ...Array<Buffer>(Math.ceil(declared / block)).fill(zeros)];
  return new Uint8Array(Buffer.concat(members));
}

/**
 * A gzip tarball of `count` empty files `f/000000`…: one header made by tar-stream, copied with the name's
 * digits and the checksum rewritten (packing 100k entries one by one takes seconds).
 */
async function manyEmptyFiles(count: number): Promise<Uint8Array> {
  const one = pack();
  const template = new Promise<Buffer>((resolve) => one.once("data", (chunk) => resolve(chunk as Buffer)));
  one.entry({ name: "f/000000", mtime: new Date(0) }, "");
  const header = await template;
  const out = Buffer.alloc((count + 2) * 512);
  for (let i = 0; i < count; i++) {
    const block = out.subarray(i * 512, (i + 1) * 512);
    header.copy(block, 0, 0, 512);
    block.write(String(i).padStart(6, "0"), 2, "ascii");
    block.fill(" ", 148, 156);
    let sum = 0;
    for (const byte of block) sum += byte;
    block.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "ascii");
  }
  return new Uint8Array(gzipSync(out));
}

describe("extractBundle", () => {
  let root: string;
  let parent: string;

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "runplane-extract-"));
    parent = join(root, "parent");
    await mkdir(parent);
    await writeFile(join(parent, "sentinel"), "untouched");
  });
  after(() => rm(root, { recursive: true, force: true }));

  /** Extracts `bundle` into a new folder under `parent`, expecting a refusal; checks nothing was left. */
  async function refused(bundle: Uint8Array, pattern: RegExp, options: { status?: number; limits?: object } = {}) {
    const dir = join(parent, "build");
    const error = await extractBundle(bundle, dir, options.limits).then(() => null, (e: unknown) => e);
    assert.ok(error instanceof ProblemError, `expected a problem, got ${error}`);
    assert.equal(error.status, options.status ?? 400);
    assert.match(error.message, pattern);
    assert.deepEqual((await readdir(parent)).sort(), ["sentinel"], "nothing is left next to the build folder");
    assert.equal(await readFile(join(parent, "sentinel"), "utf8"), "untouched");
    assert.deepEqual(await readdir(root), ["parent"], "nothing is written above it");
  }

  it("unpacks a packed folder with its executable bits", async () => {
    const app = join(root, "app");
    await mkdir(join(app, "lib"), { recursive: true });
    await writeFile(join(app, "runplane.toml"), '[deployment]\nname = "x"\n');
    await writeFile(join(app, "lib", "run.sh"), "#!/bin/sh\necho hi\n", { mode: 0o755 });
    const { bytes, files } = await packBundle(app);
    const dir = join(root, "out");
    assert.deepEqual(await extractBundle(bytes, dir), { files, bytes: 24 + 18 });
    assert.equal(await readFile(join(dir, "lib", "run.sh"), "utf8"), "#!/bin/sh\necho hi\n");
    assert.equal((await stat(join(dir, "lib", "run.sh"))).mode & 0o777, 0o755);
    assert.equal((await stat(join(dir, "runplane.toml"))).mode & 0o777, 0o644);
    await rm(app, { recursive: true });
    await rm(dir, { recursive: true });
    assert.deepEqual(await readdir(root), ["parent"]);
  });

  it("refuses '..' paths, absolute paths, links and devices, naming the entry", async () => {
    const ok = { name: "runplane.toml", text: "" };
    await refused(await tarball([ok, { name: "../escaped.txt", text: "x" }]), /\.\.\/escaped\.txt: paths with '\.\.'/);
    await refused(await tarball([ok, { name: "a/../../escaped.txt", text: "x" }]), /paths with '\.\.'/);
    await refused(await tarball([ok, { name: "/tmp/runplane-abs.txt", text: "x" }]), /absolute paths/);
    await refused(
      await tarball([ok, { name: "etc", type: "symlink", linkname: "/etc" }]),
      /etc: links are not allowed/,
    );
    await refused(await tarball([ok, { name: "inner", type: "symlink", linkname: "runplane.toml" }]), /links/);
    await refused(await tarball([ok, { name: "hard", type: "link", linkname: "/etc/passwd" }]), /hard: links/);
    await refused(
      await tarball([ok, { name: "null", type: "character-device", devmajor: 1, devminor: 3 }]),
      /null: a character-device/,
    );
    await refused(await tarball([ok, { name: "pipe", type: "fifo" }]), /pipe: a fifo/);
    await refused(
      await tarball([ok, { name: "dup", text: "1" }, { name: "dup", text: "2" }]),
      /dup: the bundle holds this file twice/,
    );
  });

  it("refuses what is not a gzip tarball", async () => {
    await refused(new TextEncoder().encode("plain text, not gzip"), /not a gzip tarball/);
    await refused(new Uint8Array(gzipSync(Buffer.alloc(1024, 7))), /not a readable tarball/);
  });

  // The cap is lowered to keep the test fast: the default (20,000) makes this unpack 20,000 files first.
  it("refuses 100k tiny files past the file cap, with 413", async () => {
    await refused(await manyEmptyFiles(100_000), /more than 2000 entries/, { status: 413, limits: { maxFiles: 2000 } });
  });

  it("stops a 10 GB gzip bomb at the unpacked-bytes limit without writing it", async () => {
    const bomb = await gzipBomb(10 * 1024 ** 3);
    assert.ok(bomb.length < 20 * 1024 * 1024, `the bomb is ${bomb.length} bytes`);
    // The header declares 10 GB: refused before a byte of it is written, at the default limit of 1 GiB.
    await refused(bomb, /unpacks to more than 1073741824 bytes/, { status: 413 });
    // An entry that declares less than it holds cannot happen in tar; padding past the entries is bounded too.
    const small = await tarball([{ name: "a", text: "x".repeat(4096) }]);
    await refused(small, /unpacks to more than 1000 bytes/, { status: 413, limits: { maxUnpackedBytes: 1000 } });
  });

  it("addresses a bundle by the SHA-256 of its bytes", async () => {
    const a = await tarball([{ name: "x", text: "1" }]);
    assert.equal(bundleDigest(a), bundleDigest(new Uint8Array(a)));
    assert.match(bundleDigest(a), /^sha256:[0-9a-f]{64}$/);
    assert.notEqual(bundleDigest(a), bundleDigest(await tarball([{ name: "x", text: "2" }])));
  });
});
