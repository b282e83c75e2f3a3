/**
 * Project volumes over the REST API on both engines (`directory` mode, which needs no root; the loop-mounted
 * mode is test/volumes/loop_volumes_test.ts): every response checked against the contract; volumes made,
 * read, listed and deleted; files uploaded, downloaded whole and by range, listed by prefix and page, and
 * deleted; a half-uploaded file never listed; uploads past the size refused; names, paths and tokens
 * refused; and links a tenant's replica can put in its volume never followed.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { mkdir, readFile, rm, symlink, utimes, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { checkedFetch } from "../_helpers/contract.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { createVolumes, volumePaths } from "../../server/volumes/mod.ts";

type Volume = { name: string; size_gb: number; size_bytes: number; used_bytes: number; created_at: string };
type Problem = { type: string; status: number; detail?: string; errors?: Array<{ path: string }> };
type Listed = { path: string; size: number; modified: string; sha256?: string };

const MIB = 1024 * 1024;
const OTHER_PROJECT = "p-other";

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Every `.rp-upload-` temporary under `dir`, links not followed. */
function uploads(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.name.startsWith(".rp-upload-")).map((e) => join(e.parentPath, e.name));
}

for (const engine of await engines()) {
  describe(`project volumes over the REST API (${engine}, directory mode)`, () => {
    let t: TestServer;
    let deploy: string;
    let reader: string;
    let other: string;
    const base = `/v3/projects/${TEST_PROJECT}/volumes`;

    before(async () => {
      t = await startTestServer({ engine, env: { RUNPLANE_VOLUMES_MODE: "directory" } });
      deploy = (await t.mintToken({ scopes: ["deploy", "rest"] })).token;
      reader = (await t.mintToken({ scopes: ["rest"] })).token;
      other = (await t.mintToken({ projectId: OTHER_PROJECT, scopes: ["deploy", "rest"] })).token;
    });
    after(() => t?.close());

    function request(
      method: string,
      url: string,
      options: { token?: string; json?: unknown; bytes?: Uint8Array; headers?: Record<string, string> } = {},
    ): Promise<Response> {
      const headers: Record<string, string> = {
        Authorization: `Bearer ${options.token ?? deploy}`,
        ...options.headers,
      };
      let body: BodyInit | undefined;
      if (options.json !== undefined) {
        headers["Content-Type"] = "application/json";
        body = JSON.stringify(options.json);
      } else if (options.bytes !== undefined) {
        headers["Content-Type"] ??= "application/octet-stream";
        body = options.bytes as unknown as BodyInit;
      }
      return checkedFetch(`${t.url}${url}`, { method, headers, body });
    }

    function filesDir(name: string, project = TEST_PROJECT): string {
      return volumePaths(t.server.context.volumes.dir, { projectId: project, name }).files;
    }

    it("makes a volume (201, then 200 for the same size, 409 for another), gets, lists and deletes it", async () => {
      const made = await request("PUT", `${base}/weights`, { json: { size_gb: 0.0625 } });
      assert.equal(made.status, 201);
      const volume = (await made.json()) as Volume;
      assert.equal(volume.name, "weights");
      assert.equal(volume.size_bytes, 64 * MIB);
      assert.equal(volume.size_gb, 0.0625);
      assert.equal(volume.used_bytes, 0);
      assert.equal((await request("PUT", `${base}/weights`, { json: { size_gb: 0.0625 } })).status, 200);
      const resized = await request("PUT", `${base}/weights`, { json: { size_gb: 1 } });
      assert.equal(resized.status, 409);
      assert.match(((await resized.json()) as Problem).detail!, /not resized/);
      const got = await request("GET", `${base}/weights`, { token: reader });
      assert.equal(got.status, 200);
      assert.equal(((await got.json()) as Volume).created_at, volume.created_at);
      assert.equal((await request("PUT", `${base}/cache`, { json: { size_gb: 0.5 } })).status, 201);
      const listed = await request("GET", base, { token: reader });
      assert.deepEqual(((await listed.json()) as { volumes: Volume[] }).volumes.map((v) => v.name), [
        "cache",
        "weights",
      ]);
      assert.ok(existsSync(filesDir("cache")));
      assert.equal((await request("DELETE", `${base}/cache`)).status, 204);
      assert.ok(!existsSync(filesDir("cache")), "its folder is gone");
      assert.equal((await request("DELETE", `${base}/cache`)).status, 404);
      assert.equal((await request("GET", `${base}/cache`)).status, 404);
    });

    it("refuses names and sizes out of bounds (400) and a volume past the project's limit (409)", async () => {
      for (const name of ["Weights", "1abc", "-a", "a.b", "a%2Fb", "a".repeat(64), "%C3%A9"]) {
        const refused = await request("PUT", `${base}/${name}`, { json: { size_gb: 1 } });
        assert.equal(refused.status, 400, name);
      }
      for (const size_gb of [0, 0.01, 1025, -1, "1"]) {
        const refused = await request("PUT", `${base}/sized`, { json: { size_gb } });
        assert.equal(refused.status, 400, String(size_gb));
      }
      assert.equal((await request("PUT", `${base}/sized`, { json: {} })).status, 400);
      const count = ((await (await request("GET", base)).json()) as { volumes: Volume[] }).volumes.length;
      for (let i = count; i < 32; i++) {
        assert.equal((await request("PUT", `${base}/many-${i}`, { json: { size_gb: 0.0625 } })).status, 201);
      }
      const past = await request("PUT", `${base}/one-too-many`, { json: { size_gb: 0.0625 } });
      assert.equal(past.status, 409);
      assert.match(((await past.json()) as Problem).detail!, /limit is 32/);
      for (let i = count; i < 32; i++) assert.equal((await request("DELETE", `${base}/many-${i}`)).status, 204);
    });

    it("lets in only tokens of the project with the scope: 401 without, 403 for another project or no deploy", async () => {
      const anonymous = await checkedFetch(`${t.url}${base}`);
      assert.equal(anonymous.status, 401);
      for (const [method, url] of [["GET", base], ["GET", `${base}/weights`], ["GET", `${base}/weights/files`]]) {
        assert.equal((await request(method, url, { token: other })).status, 403, `${method} ${url}`);
      }
      assert.equal((await request("PUT", `${base}/weights`, { token: other, json: { size_gb: 1 } })).status, 403);
      assert.equal((await request("DELETE", `${base}/weights`, { token: other })).status, 403);
      const file = `${base}/weights/files/x.bin`;
      assert.equal((await request("PUT", file, { token: other, bytes: new Uint8Array(3) })).status, 403);
      assert.equal((await request("PUT", file, { token: reader, bytes: new Uint8Array(3) })).status, 403);
      assert.equal((await request("PUT", `${base}/readers`, { token: reader, json: { size_gb: 1 } })).status, 403);
      assert.equal((await request("DELETE", `${base}/weights`, { token: reader })).status, 403);
      const run = (await t.mintToken({ scopes: ["run"] })).token;
      assert.equal((await request("GET", base, { token: run })).status, 403);
      assert.ok(!existsSync(join(filesDir("weights"), "x.bin")));
    });

    it("uploads a file (201, its sha256), replaces it (200), downloads it whole and by range, deletes it", async () => {
      const bytes = randomBytes(3 * MIB + 17);
      const put = await request("PUT", `${base}/weights/files/models/small.bin`, { bytes });
      assert.equal(put.status, 201);
      assert.deepEqual(await put.json(), { path: "models/small.bin", size: bytes.length, sha256: sha256(bytes) });
      assert.deepEqual(await readFile(join(filesDir("weights"), "models", "small.bin")), bytes);
      const whole = await request("GET", `${base}/weights/files/models/small.bin`, { token: reader });
      assert.equal(whole.status, 200);
      assert.equal(whole.headers.get("etag"), `"${sha256(bytes)}"`);
      assert.equal(whole.headers.get("content-length"), String(bytes.length));
      assert.equal(whole.headers.get("accept-ranges"), "bytes");
      assert.equal(sha256(new Uint8Array(await whole.arrayBuffer())), sha256(bytes));
      // A GET's HEAD (outside the contract's operations): its headers, no body, the file not read.
      const head = await fetch(`${t.url}${base}/weights/files/models/small.bin`, {
        method: "HEAD",
        headers: { Authorization: `Bearer ${reader}` },
      });
      assert.equal(head.status, 200);
      assert.equal(head.headers.get("content-length"), String(bytes.length));
      assert.equal(head.headers.get("etag"), `"${sha256(bytes)}"`);
      const ranges: Array<[string, number, number]> = [
        ["bytes=0-0", 0, 0],
        ["bytes=100-1099", 100, 1099],
        [`bytes=${bytes.length - 10}-`, bytes.length - 10, bytes.length - 1],
        ["bytes=-5", bytes.length - 5, bytes.length - 1],
        [`bytes=${MIB}-${bytes.length * 2}`, MIB, bytes.length - 1],
      ];
      for (const [range, start, end] of ranges) {
        const part = await request("GET", `${base}/weights/files/models/small.bin`, { headers: { Range: range } });
        assert.equal(part.status, 206, range);
        assert.equal(part.headers.get("content-range"), `bytes ${start}-${end}/${bytes.length}`);
        assert.deepEqual(new Uint8Array(await part.arrayBuffer()), new Uint8Array(bytes.subarray(start, end + 1)));
      }
      for (const range of [`bytes=${bytes.length}-`, `bytes=${bytes.length + 5}-${bytes.length + 9}`, "bytes=-0"]) {
        const past = await request("GET", `${base}/weights/files/models/small.bin`, { headers: { Range: range } });
        assert.equal(past.status, 416, range);
        assert.equal(past.headers.get("content-range"), `bytes */${bytes.length}`);
      }
      // Not one range of bytes: ignored, the whole file (RFC 9110 lets a server do so).
      const several = await request("GET", `${base}/weights/files/models/small.bin`, {
        headers: { Range: "bytes=0-1,5-6" },
      });
      assert.equal(several.status, 200);
      assert.equal((await several.arrayBuffer()).byteLength, bytes.length);
      const replaced = await request("PUT", `${base}/weights/files/models/small.bin`, { bytes: bytes.subarray(0, 10) });
      assert.equal(replaced.status, 200);
      const used = ((await (await request("GET", `${base}/weights`)).json()) as Volume).used_bytes;
      assert.equal(used, 10);
      assert.equal((await request("DELETE", `${base}/weights/files/models/small.bin`)).status, 204);
      assert.equal((await request("DELETE", `${base}/weights/files/models/small.bin`)).status, 404);
      assert.equal((await request("GET", `${base}/weights/files/models/small.bin`)).status, 404);
      assert.equal((await request("GET", `${base}/weights/files/models`)).status, 404, "a folder is not a file");
      assert.equal(
        (await request("PUT", `${base}/weights/files/models`, { bytes })).status,
        409,
        "a folder stands there",
      );
      assert.equal((await request("PUT", `${base}/nothing/files/a.bin`, { bytes })).status, 404, "no such volume");
      const wrongType = await request("PUT", `${base}/weights/files/a.bin`, {
        bytes,
        headers: { "Content-Type": "text/plain" },
      });
      assert.equal(wrongType.status, 415);
    });

    it("lists files by prefix and page, in path order, with their sha256 (a file written there has none)", async () => {
      const names = ["a/1.bin", "a/2.bin", "a/b/3.bin", "a-z.bin", "b/4.bin", "top.bin", "ü/5.bin"];
      for (const name of names) {
        const encoded = name.split("/").map(encodeURIComponent).join("/");
        assert.equal(
          (await request("PUT", `${base}/weights/files/${encoded}`, { bytes: Buffer.from(name) })).status,
          201,
        );
      }
      // A file a replica wrote: listed, without a sha256.
      await writeFile(join(filesDir("weights"), "by-replica.txt"), "hello");
      const seen: Listed[] = [];
      let cursor: string | null = null;
      do {
        const query: string = `?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
        const page = await request("GET", `${base}/weights/files${query}`, { token: reader });
        const body = (await page.json()) as { files: Listed[]; next_cursor: string | null };
        assert.ok(body.files.length <= 3);
        seen.push(...body.files);
        cursor = body.next_cursor;
      } while (cursor);
      const all = [...names, "by-replica.txt"].sort();
      assert.deepEqual(seen.map((f) => f.path), all);
      for (const file of seen) {
        if (file.path === "by-replica.txt") assert.equal(file.sha256, undefined);
        else assert.equal(file.sha256, sha256(Buffer.from(file.path)), file.path);
        assert.ok(!Number.isNaN(Date.parse(file.modified)));
      }
      const prefixed = await request("GET", `${base}/weights/files?prefix=a/`);
      assert.deepEqual(((await prefixed.json()) as { files: Listed[] }).files.map((f) => f.path), [
        "a/1.bin",
        "a/2.bin",
        "a/b/3.bin",
      ]);
      const a = await request("GET", `${base}/weights/files?prefix=a`);
      assert.deepEqual(((await a.json()) as { files: Listed[] }).files.map((f) => f.path), [
        "a-z.bin",
        "a/1.bin",
        "a/2.bin",
        "a/b/3.bin",
      ]);
      assert.equal((await request("GET", `${base}/weights/files?cursor=%21%21`)).status, 400);
    });

    it("refuses paths that could leave the volume (400) and never lists or overwrites an upload's temporary", async () => {
      for (
        const path of [
          "..%2Fescape",
          "a%2F..%2F..%2Fescape",
          "%2Fetc%2Fpasswd",
          "a%00b",
          "a%2F.%2Fb",
          "a//b",
          `${"x".repeat(256)}`,
          ".rp-upload-1234",
          "%E0%A4%A",
        ]
      ) {
        const refused = await request("PUT", `${base}/weights/files/${path}`, { bytes: Buffer.from("x") });
        assert.equal(refused.status, 400, path);
      }
      const long = Array.from({ length: 20 }, () => "y".repeat(200)).join("/");
      assert.equal((await request("PUT", `${base}/weights/files/${long}`, { bytes: Buffer.from("x") })).status, 400);
      assert.ok(!existsSync(join(filesDir("weights"), "..", "escape")));
      assert.ok(!existsSync(join(filesDir("weights"), "escape")));
    });

    it("never follows a link a replica put in the volume: to /etc, to a file, to another project's volume", async () => {
      assert.equal(
        (await request("PUT", `/v3/projects/${OTHER_PROJECT}/volumes/private`, {
          token: other,
          json: { size_gb: 0.0625 },
        })).status,
        201,
      );
      const secret = randomBytes(32).toString("hex");
      const otherFile = `/v3/projects/${OTHER_PROJECT}/volumes/private/files/secret.txt`;
      assert.equal((await request("PUT", otherFile, { token: other, bytes: Buffer.from(secret) })).status, 201);
      const dir = filesDir("weights");
      const sandbox = join(t.dataDir, "outside");
      await mkdir(sandbox, { recursive: true });
      await writeFile(join(sandbox, "victim.txt"), "untouched");
      await symlink("/etc", join(dir, "etc"));
      await symlink(filesDir("private", OTHER_PROJECT), join(dir, "other"));
      await symlink(sandbox, join(dir, "outside"));
      await symlink(join(sandbox, "victim.txt"), join(dir, "victim.txt"));
      await mkdir(join(dir, "deep"), { recursive: true });
      await symlink(sandbox, join(dir, "deep", "down"));
      const passwd = readFileSync("/etc/passwd");
      const attacks = [
        "etc/passwd",
        "etc/runplane-made",
        "other/secret.txt",
        "outside/victim.txt",
        "outside/new.txt",
        "victim.txt",
        "deep/down/victim.txt",
        "deep/down/x/y.txt",
        "etc",
        "other",
      ];
      for (const path of attacks) {
        const put = await request("PUT", `${base}/weights/files/${path}`, { bytes: Buffer.from("pwned") });
        assert.equal(put.status, 400, `PUT ${path}`);
        assert.match(((await put.json()) as Problem).detail!, /link/);
        assert.equal((await request("GET", `${base}/weights/files/${path}`)).status, 400, `GET ${path}`);
        assert.equal((await request("DELETE", `${base}/weights/files/${path}`)).status, 400, `DELETE ${path}`);
      }
      assert.deepEqual(readFileSync("/etc/passwd"), passwd);
      assert.ok(!existsSync("/etc/runplane-made"));
      assert.equal(readFileSync(join(sandbox, "victim.txt"), "utf8"), "untouched");
      assert.deepEqual(readdirSync(sandbox), ["victim.txt"]);
      assert.equal(readFileSync(join(filesDir("private", OTHER_PROJECT), "secret.txt"), "utf8"), secret);
      // A listing walks no link either.
      const listed = await request("GET", `${base}/weights/files`);
      const paths = ((await listed.json()) as { files: Listed[] }).files.map((f) => f.path);
      assert.ok(paths.every((p) => !/^(etc|other|outside|victim|deep)/.test(p)), paths.join(", "));
      // Nor does a volume's use (directory mode sums its files): /etc is not counted.
      const used = ((await (await request("GET", `${base}/weights`)).json()) as Volume).used_bytes;
      assert.ok(used < 64 * 1024, String(used));
      // Deleting the volume removes the links, never what they point at.
      assert.equal(
        (await request("DELETE", `/v3/projects/${OTHER_PROJECT}/volumes/private`, { token: other })).status,
        204,
      );
      assert.ok(existsSync("/etc/passwd"));
    });

    it("refuses an upload past the volume's size: by Content-Length up front, and as it streams (413), nothing left", async () => {
      assert.equal((await request("PUT", `${base}/tiny`, { json: { size_gb: 0.0625 } })).status, 201);
      const declared = await request("PUT", `${base}/tiny/files/big.bin`, { bytes: new Uint8Array(65 * MIB) });
      assert.equal(declared.status, 413);
      // Streamed without a length: refused once past the free bytes.
      const chunks = async function*() {
        for (let i = 0; i < 70; i++) yield new Uint8Array(MIB);
      };
      const streamed = await checkedFetch(`${t.url}${base}/tiny/files/streamed.bin`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${deploy}`, "Content-Type": "application/octet-stream" },
        body: chunks() as unknown as BodyInit,
        duplex: "half",
      } as RequestInit);
      assert.equal(streamed.status, 413);
      assert.deepEqual(uploads(filesDir("tiny")), []);
      assert.deepEqual(readdirSync(filesDir("tiny")), []);
      // Still usable: a file that fits.
      const fits = await request("PUT", `${base}/tiny/files/fits.bin`, { bytes: new Uint8Array(60 * MIB) });
      assert.equal(fits.status, 201);
      assert.equal(
        (await request("PUT", `${base}/tiny/files/more.bin`, { bytes: new Uint8Array(5 * MIB) })).status,
        413,
      );
      assert.equal((await request("DELETE", `${base}/tiny`)).status, 204);
    });

    it("answers 503 for a volume whose folder this host does not see, never serving an empty new one", async () => {
      assert.equal((await request("PUT", `${base}/gone`, { json: { size_gb: 0.0625 } })).status, 201);
      const root = join(filesDir("gone"), "..");
      rmSync(root, { recursive: true });
      for (const url of [`${base}/gone`, `${base}/gone/files`, `${base}/gone/files/a.bin`]) {
        const answer = await request("GET", url);
        assert.equal(answer.status, 503, url);
      }
      assert.equal((await request("PUT", `${base}/gone/files/a.bin`, { bytes: Buffer.from("x") })).status, 503);
      assert.ok(!existsSync(root), "nothing made in its place");
      // Asked for again with its size, it is made here.
      assert.equal((await request("PUT", `${base}/gone`, { json: { size_gb: 0.0625 } })).status, 200);
      assert.ok(existsSync(filesDir("gone")));
      assert.equal((await request("DELETE", `${base}/gone`)).status, 204);
    });

    it("never lists a half-uploaded file, and removes its temporary when the client goes away", async () => {
      const url = new URL(`${t.url}${base}/weights/files/half.bin`);
      await new Promise<void>((resolve, reject) => {
        const socket = connect(Number(url.port), url.hostname, () => {
          socket.write(
            `PUT ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${deploy}\r\n`
              + `Content-Type: application/octet-stream\r\nContent-Length: ${20 * MIB}\r\n\r\n`,
          );
          socket.write(randomBytes(4 * MIB), () => {
            // Mid-upload, a temporary exists and the listing does not show it.
            const poll = async () => {
              while (uploads(filesDir("weights")).length === 0) await new Promise((r) => setTimeout(r, 20));
              const listed = await request("GET", `${base}/weights/files?prefix=half`);
              assert.deepEqual(((await listed.json()) as { files: Listed[] }).files, []);
              socket.destroy();
              resolve();
            };
            poll().catch(reject);
          });
        });
        socket.on("error", reject);
      });
      while (uploads(filesDir("weights")).length > 0) await new Promise((r) => setTimeout(r, 20));
      assert.ok(!existsSync(join(filesDir("weights"), "half.bin")));
      const listed = await request("GET", `${base}/weights/files?prefix=half`);
      assert.deepEqual(((await listed.json()) as { files: Listed[] }).files, []);
      assert.ok(statSync(filesDir("weights")).isDirectory());
    });

    it("removes a dead server's uploads untouched for an hour when another process first readies the volume, never a live one", async () => {
      // A shared folder (directory mode): another host may be uploading into it now, so only stale ones go.
      const dir = filesDir("weights");
      await mkdir(join(dir, "deep"), { recursive: true });
      const stale = [
        join(dir, ".rp-upload-aaaaaaaaaaaaaaaaaaaaaaaa"),
        join(dir, "deep", ".rp-upload-bbbbbbbbbbbbbbbbbbbbbbbb"),
      ];
      const live = join(dir, "deep", ".rp-upload-cccccccccccccccccccccccc");
      for (const path of [...stale, live]) await writeFile(path, randomBytes(1024));
      const twoHoursAgo = new Date(Date.now() - 2 * 60 * 60 * 1000);
      for (const path of stale) await utimes(path, twoHoursAgo, twoHoursAgo);
      // This process swept when it first readied the volume: it leaves them to the next process's start.
      assert.equal((await request("GET", `${base}/weights`)).status, 200);
      assert.ok(stale.every((path) => existsSync(path)));
      const { store, volumes } = t.server.context;
      const another = createVolumes({ db: store.db, now: () => Date.now(), dir: volumes.dir, mode: "directory" });
      assert.equal((await another.get(TEST_PROJECT, "weights"))?.name, "weights");
      assert.deepEqual(stale.filter((path) => existsSync(path)), []);
      assert.ok(existsSync(live), "an upload written within the hour is someone's, under way");
      await rm(live);
    });
  });
}
