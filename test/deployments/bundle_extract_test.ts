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

/** `count` bytes of zeros as gzip members (RFC 1952 lets members follow one another), about 1/1000 the size. */
function gzippedZeros(count: number): Buffer[] {
  const block = 8 * 1024 * 1024;
  const member = gzipSync(Buffer.alloc(block), { level: 9 });
  return Array<Buffer>(Math.ceil(count / block)).fill(member);
}

/**
 * A gzip bomb: one entry whose header declares `declared` bytes, then that many zeros. The zeros are never
 * held unpacked: the same small gzip member is repeated, so 10 GB comes to about 10 MB, made in milliseconds.
 */
async function gzipBomb(declared: number): Promise<Uint8Array> {
  const header = pack();
  const headerBytes = new Promise<Buffer>((resolve) => header.once("data", (chunk) => resolve(chunk as Buffer)));
  header.entry({ name: "zeros.bin", size: declared });
  return new Uint8Array(Buffer.concat([gzipSync(await headerBytes), ...gzippedZeros(declared)]));
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

/**
 * Returns a function that tells the seconds of CPU this process used since: the work done, which a
 * machine loaded by others does not stretch as it stretches the time on the clock.
 */
function cpuSeconds(): () => number {
  const start = process.cpuUsage();
  return () => {
    const { user, system } = process.cpuUsage(start);
    return (user + system) / 1e6;
  };
}

/**
 * Most CPU a refusal of a 10 GB bomb may cost: gunzipping its 10 GB of zeros takes 11-12 s of CPU on the
 * test machine (1 GiB in 1.2 s) and would take over 5 s on one twice as fast, while a refusal at the
 * header costs milliseconds and one at the 64 MiB bound about half a second.
 */
const REFUSAL_CPU_SECONDS = 2.5;

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
    assert.equal(error.kind, error.status === 400 ? "validation" : "content-too-large");
    if (error.status === 400) assert.equal(error.options.errors?.[0]?.path, "body");
    assert.match(error.message, pattern);
    assert.doesNotMatch(error.message, new RegExp(root), "the server's folders are not named");
    assert.deepEqual((await readdir(parent)).sort(), ["sentinel"], "nothing is left next to the build folder");
    assert.equal(await readFile(join(parent, "sentinel"), "utf8"), "untouched");
    assert.deepEqual(await readdir(root), ["parent"], "nothing is written above it");
    await assert.rejects(stat("/tmp/runplane-abs.txt"), "nothing is written at an absolute path");
  }

  it("unpacks a packed folder with its executable bits, whatever the umask", async () => {
    const app = join(root, "app");
    const long = `lib/${"deep/".repeat(30)}name.txt`; // past tar's 100 characters: a pax header
    await mkdir(join(app, long, ".."), { recursive: true });
    await writeFile(join(app, "runplane.toml"), '[deployment]\nname = "x"\n');
    await writeFile(join(app, "lib", "run.sh"), "#!/bin/sh\necho hi\n", { mode: 0o755 });
    await writeFile(join(app, long), "long");
    const { bytes, files } = await packBundle(app);
    const dir = join(root, "out");
    const umask = process.umask(0o077);
    try {
      assert.deepEqual(await extractBundle(bytes, dir), { files: 3, bytes: 24 + 18 + 4 });
    } finally {
      process.umask(umask);
    }
    assert.equal(files, 3);
    assert.equal(await readFile(join(dir, "lib", "run.sh"), "utf8"), "#!/bin/sh\necho hi\n");
    assert.equal(await readFile(join(dir, long), "utf8"), "long");
    assert.equal((await stat(join(dir, "lib", "run.sh"))).mode & 0o777, 0o755);
    assert.equal((await stat(join(dir, "runplane.toml"))).mode & 0o777, 0o644);
    await rm(app, { recursive: true });
    await rm(dir, { recursive: true });
    assert.deepEqual(await readdir(root), ["parent"]);
  });

  it("keeps only the executable bit of a crafted entry's mode", async () => {
    const bundle = await tarball([
      { name: "setuid", text: "x", mode: 0o4777 },
      { name: "private", text: "y", mode: 0o600 },
    ]);
    const dir = join(root, "modes");
    await extractBundle(bundle, dir);
    assert.equal((await stat(join(dir, "setuid"))).mode & 0o7777, 0o755);
    assert.equal((await stat(join(dir, "private"))).mode & 0o7777, 0o644);
    await rm(dir, { recursive: true });
  });

  it("refuses a folder that is not empty, leaving it as it was", async () => {
    await assert.rejects(extractBundle(await tarball([{ name: "a", text: "1" }]), parent), /is not empty/);
    assert.deepEqual(await readdir(parent), ["sentinel"]);
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
      await tarball([ok, { name: "disk", type: "block-device", devmajor: 8, devminor: 0 }]),
      /disk: a block/,
    );
  });

  it("refuses a path held twice or as both a file and a folder, naming the entry", async () => {
    const ok = { name: "runplane.toml", text: "" };
    await refused(
      await tarball([ok, { name: "dup", text: "1" }, { name: "./dup", text: "2" }]),
      /\.\/dup: the bundle holds this file twice/,
    );
    await refused(
      await tarball([ok, { name: "lib", text: "1" }, { name: "lib/x.py", text: "2" }]),
      /lib\/x\.py: its folder lib is a file in the bundle/,
    );
    await refused(
      await tarball([ok, { name: "lib", text: "1" }, { name: "lib", type: "directory" }]),
      /lib: the bundle holds this path both as a file and as a folder/,
    );
    await refused(
      await tarball([ok, { name: "lib/x.py", text: "1" }, { name: "lib", text: "2" }]),
      /lib: the bundle holds this path both as a file and as a folder/,
    );
  });

  it("refuses a name over 255 bytes or a path over 3,072 bytes with 400, naming the entry", async () => {
    const ok = { name: "runplane.toml", text: "" };
    const longName = `${"n".repeat(256)}.py`;
    await refused(await tarball([ok, { name: longName, text: "x" }]), new RegExp(`${longName}: .*at most 255 bytes`));
    const longUnicode = `lib/${"é".repeat(128)}/x.py`; // 128 characters, 256 bytes
    await refused(await tarball([ok, { name: longUnicode, text: "x" }]), /x\.py: a file or folder name .* has 256$/);
    await refused(await tarball([ok, { name: longUnicode.slice(0, -5), type: "directory" }]), /at most 255 bytes/);
    const deep = `${"d".repeat(200)}/`.repeat(21) + "x.py"; // 4,225 bytes: past PATH_MAX
    await refused(
      await tarball([ok, { name: deep, text: "x" }]),
      /d\/x\.py: a path in the bundle is at most 3072 bytes/,
    );
  });

  it("unpacks a name of 255 bytes and a path of 3,072", async () => {
    const name = "n".repeat(255);
    const path = `${"d".repeat(254)}/`.repeat(12) + "f".repeat(3072 - 255 * 12);
    const dir = await mkdtemp(join(tmpdir(), "runplane-long-"));
    try {
      await extractBundle(await tarball([{ name, text: "1" }, { name: path, text: "2" }]), join(dir, "app"));
      assert.equal(await readFile(join(dir, "app", name), "utf8"), "1");
      assert.equal(await readFile(join(dir, "app", path), "utf8"), "2");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses what is not a gzip tarball", async () => {
    await refused(new TextEncoder().encode("plain text, not gzip"), /not a gzip tarball/);
    await refused(new Uint8Array(gzipSync(Buffer.alloc(1024, 7))), /not a readable tarball/);
  });

  // The cap is lowered to keep the test fast: at the default (20,000) it writes 20,000 files first (14 s).
  it("refuses 100k tiny files past the file cap, with 413, naming the first entry over it", async () => {
    await refused(await manyEmptyFiles(100_000), /f\/002000: the bundle has more than 2000 entries/, {
      status: 413,
      limits: { maxFiles: 2000 },
    });
  });

  it("stops a gzip bomb declaring 10 GB at the default limit before a byte of it is written", async () => {
    const bomb = await gzipBomb(10 * 1024 ** 3);
    assert.ok(bomb.length < 20 * 1024 * 1024, `the bomb is ${bomb.length} bytes`);
    const used = cpuSeconds();
    await refused(bomb, /zeros\.bin: the bundle unpacks to more than 1073741824 bytes/, { status: 413 });
    const seconds = used();
    assert.ok(seconds < REFUSAL_CPU_SECONDS, `refused at the header, not after unpacking: ${seconds} s of CPU`);
  });

  it("refuses files that together pass the unpacked-bytes limit, naming the first one over it", async () => {
    const bundle = await tarball([{ name: "a", text: "x".repeat(600) }, { name: "b", text: "y".repeat(600) }]);
    await refused(bundle, /b: the bundle unpacks to more than 1000 bytes/, {
      status: 413,
      limits: { maxUnpackedBytes: 1000 },
    });
  });

  // Zeros after the last entry are end-of-archive blocks to tar: no header counts them, the gunzip bound
  // does. At the default limit this unpacks 1 GiB first (6 s), so the limit is lowered.
  it("stops a gzip bomb padding a small tarball with 10 GB of zeros soon after the limit", async () => {
    const small = await tarball([{ name: "runplane.toml", text: "" }]);
    const bomb = new Uint8Array(Buffer.concat([small, ...gzippedZeros(10 * 1024 ** 3)]));
    const used = cpuSeconds();
    await refused(bomb, /the bundle unpacks to more than 67108864 bytes/, {
      status: 413,
      limits: { maxUnpackedBytes: 64 * 1024 ** 2, maxFiles: 100 },
    });
    const seconds = used();
    assert.ok(seconds < REFUSAL_CPU_SECONDS, `stopped long before 10 GB are unpacked: ${seconds} s of CPU`);
  });

  it("addresses a bundle by the SHA-256 of its bytes", async () => {
    const a = await tarball([{ name: "x", text: "1" }]);
    assert.equal(bundleDigest(a), bundleDigest(new Uint8Array(a)));
    assert.match(bundleDigest(a), /^sha256:[0-9a-f]{64}$/);
    assert.notEqual(bundleDigest(a), bundleDigest(await tarball([{ name: "x", text: "2" }])));
  });
});
