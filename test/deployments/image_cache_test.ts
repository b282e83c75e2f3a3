/**
 * The bounded image cache (server/deployments/_image_cache.ts) against real parts: three images (the test
 * base image under three labels, so three digests) pulled from a loopback registry into a real store and
 * unpacked, and a system layer; then a server with a tiny bound whose evicted image is deployed again.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cp, lstat, mkdir, mkdtemp, readdir, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { startImageCache } from "../../server/deployments/_image_cache.ts";
import {
  createImageStore,
  findImageTools,
  type ImageStore,
  type ImageStoreOptions,
  treeBytes,
} from "../../server/images/mod.ts";
import { createLogger } from "../../server/log.ts";
import { type ImageAppsServer, startImageAppsServer } from "../_helpers/image_apps.ts";
import {
  BASE_IMAGE_TAG,
  imageToolsWork,
  startTestRegistry,
  testBaseImage,
  type TestRegistry,
} from "../_helpers/images.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";

const works = await imageToolsWork("the image cache tests (test/deployments/image_cache_test.ts)");

function umoci(args: string[]): Promise<void> {
  return new Promise((resolve, reject) =>
    execFile("umoci", args, (error, _out, err) => error ? reject(new Error(`umoci ${args[0]}: ${err}`)) : resolve())
  );
}

/** Pushes the base image as `runplane-test/cache:v<n>` for each n, each with its own label (its own digest). */
async function pushVariants(registry: TestRegistry, count: number): Promise<{ dir: string; references: string[] }> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-image-cache-layout-"));
  const layout = join(dir, "oci");
  await cp(await testBaseImage(), layout, { recursive: true });
  const references: string[] = [];
  for (let n = 1; n <= count; n++) {
    await umoci(["config", "--image", `${layout}:${BASE_IMAGE_TAG}`, "--config.label", `runplane.test.variant=${n}`]);
    await registry.push(layout, { tag: BASE_IMAGE_TAG, name: `runplane-test/cache:v${n}` });
    references.push(`${registry.host}/runplane-test/cache:v${n}`);
  }
  return { dir, references };
}

function exists(path: string): Promise<boolean> {
  return lstat(path).then(() => true, () => false);
}

async function stampAt(tree: string, hoursAgo: number): Promise<void> {
  const when = new Date(Date.now() - hoursAgo * 3600_000);
  await writeFile(`${tree}.used`, "");
  await utimes(`${tree}.used`, when, when);
}

describe("the image cache over a real store", { skip: !works }, () => {
  let registry: TestRegistry;
  let layouts: string;
  let references: string[];
  let data: string;
  let store: ImageStore;
  let storeOptions: ImageStoreOptions;

  before(async () => {
    registry = await startTestRegistry();
    ({ dir: layouts, references } = await pushVariants(registry, 3));
    data = await mkdtemp(join(tmpdir(), "runplane-image-cache-"));
    const hosts = [registry.host];
    const logger = createLogger({ level: "silent" });
    storeOptions = { tools: await findImageTools(), registries: hosts, insecureRegistries: hosts, logger };
    store = createImageStore(join(data, "images"), storeOptions);
  });

  after(async () => {
    await registry?.close();
    for (const dir of [layouts, data]) if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("evicts the least recently used roots and layers not in use until under the bound, never one in use", async () => {
    const digests: string[] = [];
    const roots: string[] = [];
    for (const reference of references) {
      const digest = await store.pull(reference);
      digests.push(digest);
      roots.push(await store.unpack(digest));
    }
    assert.equal(new Set(digests).size, 3);
    // A system layer: a folder named by its digest, its .ready beside it.
    const layer = join(data, "image-layers", "a".repeat(64));
    await mkdir(layer, { recursive: true });
    await writeFile(join(layer, "blob"), Buffer.alloc(4 << 20, 1));
    await writeFile(`${layer}.ready`, `sha256:${"a".repeat(64)}\n`);
    // A deployment built on roots[1] and no longer served: its marker must go with the root.
    await mkdir(join(data, "deployments"), { recursive: true });
    const marker = join(data, "deployments", "dep_old.built.json");
    await writeFile(marker, JSON.stringify({ dir: "/x", image: { root: roots[1] } }));
    // Oldest first: roots[0] (in use), the layer, roots[1], roots[2].
    await stampAt(roots[0]!, 4);
    await stampAt(layer, 3);
    await stampAt(roots[1]!, 2);
    await stampAt(roots[2]!, 1);
    const size = await treeBytes(roots[0]!);
    // As a process started since sees them: this store unpacked them just now, and says so to its evictions.
    const restarted = createImageStore(join(data, "images"), storeOptions);
    const messages: string[] = [];
    const destination = new Writable({
      write(chunk, _encoding, done) {
        messages.push(...String(chunk).split("\n").filter(Boolean));
        done();
      },
    });
    const logger = createLogger({ level: "info", destination });
    const cache = startImageCache({
      dataDir: data,
      images: restarted,
      boundBytes: Math.round(size * 2.5),
      minAgeMs: 30 * 60_000,
      logger,
      inUse: () => [roots[0]!],
    });
    await cache.prune();
    assert.ok(await exists(roots[0]!), "the root in use is kept though it is the oldest");
    assert.equal(await exists(layer), false, "the least recently used layer is evicted");
    assert.equal(await exists(`${layer}.ready`), false);
    assert.equal(await exists(roots[1]!), false, "the next least recently used root is evicted");
    assert.ok(await exists(roots[2]!), "the most recently used one is kept: the total is under the bound");
    assert.equal(await exists(marker), false, "the deployment built on it is to be built again");
    await assert.rejects(store.config(digests[1]!), "the evicted image is untagged and collected");
    const left = (await readdir(join(data, "images", "roots"))).filter((name) => !name.endsWith(".used"));
    assert.deepEqual(left.sort(), roots.filter((_, i) => i !== 1).map((root) => root.split("/").pop()).sort());
    const evictions = messages.map((line) => JSON.parse(line)).filter((line) => line.image_cache);
    assert.deepEqual(evictions.map((line) => line.image_cache), ["layer", "root"]);
    assert.ok(evictions.every((line) => line.bytes > 0 && line.last_used), "each eviction logs its size and last use");

    // Pulled and unpacked again, the image is whole.
    assert.equal(await store.pull(references[1]!), digests[1]);
    assert.equal(await store.unpack(digests[1]!), roots[1]);
    assert.ok(await exists(join(roots[1]!, "usr", "bin", "python3")));
  });

  it("keeps what was used within its minimum age, whatever the bound", async () => {
    const cache = startImageCache({
      images: createImageStore(join(data, "images"), storeOptions),
      dataDir: data,
      boundBytes: 1,
      minAgeMs: 30 * 60_000,
      logger: createLogger({ level: "silent" }),
      inUse: () => [],
    });
    const before = (await store.roots()).map((root) => root.path);
    await cache.prune(); // only the root stamped an hour ago is old enough
    const after = (await store.roots()).map((root) => root.path);
    // Left: the one in use at the last pass (said used then) and the one unpacked again just now.
    assert.equal(after.length, 2);
    assert.equal(before.length, 3);
    assert.ok(after.every((path) => before.includes(path)));
  });
});

describe("a server with a tiny image cache", { skip: !works }, () => {
  let apps: ImageAppsServer | undefined;
  let layouts: string | undefined;

  before(async () => {
    if (!await sandboxWorks("the image cache's server test")) return;
    apps = await startImageAppsServer({
      env: { RUNPLANE_IMAGE_CACHE_GB: "0.000001", RUNPLANE_IMAGE_CACHE_MIN_AGE: "0s" },
    });
  });

  after(async () => {
    await apps?.close();
    if (layouts) await rm(layouts, { recursive: true, force: true });
  });

  function app(reference: string): Record<string, string> {
    return {
      "runplane.toml": `[deployment]\nname = "cached"\n[build]\nbase_image = "${reference}"\n`,
      "main.py": "import platform\n\ndef run():\n    return {'python': platform.python_version()}\n",
    };
  }

  async function rootsOnDisk(): Promise<string[]> {
    const names = await readdir(join(apps!.server.dataDir, "images", "roots")).catch(() => [] as string[]);
    return names.filter((name) => name.startsWith("sha256-") && !name.endsWith(".used")).sort();
  }

  async function settled(expected: number): Promise<string[]> {
    for (let i = 0; i < 100; i++) {
      const roots = await rootsOnDisk();
      if (roots.length === expected) return roots;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return await rootsOnDisk();
  }

  it("evicts the image no deployment serves after a build, and a redeploy of it pulls and unpacks it again", async (t) => {
    if (!apps) return t.skip("no sandbox");
    const pushed = await pushVariants(apps.registry, 2);
    layouts = pushed.dir;
    const [first, second] = pushed.references as [string, string];
    const one = await apps.deployed("cached", app(first));
    assert.equal(one.deployment.status, "ready", one.log);
    assert.equal((await apps.call("cached")).status, 200);
    const firstRoots = await settled(1);
    assert.equal(firstRoots.length, 1, "the root in service is kept over the bound");

    const two = await apps.deployed("cached", app(second));
    assert.equal(two.deployment.status, "ready", two.log);
    const secondRoots = await settled(1);
    assert.equal(secondRoots.length, 1);
    assert.notDeepEqual(secondRoots, firstRoots, "the first image's root is evicted, the served one kept");

    const three = await apps.deployed("cached", app(first));
    assert.equal(three.deployment.status, "ready", three.log);
    assert.match(three.log, /image: root file system ready/);
    const { status, body } = await apps.call("cached");
    assert.equal(status, 200);
    assert.match(String(body.result?.python), /^3\.13/);
    assert.deepEqual(await settled(1), firstRoots, "unpacked again under its digest; the second one evicted");
  });
});
