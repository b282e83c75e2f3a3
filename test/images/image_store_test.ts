/**
 * The image store against real parts: a base image built locally by mmdebstrap, served by a registry of the
 * test's own on loopback, pulled by skopeo and unpacked by umoci.
 */
import assert from "node:assert/strict";
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import {
  createImageStore,
  findImageTools,
  ImageReferenceError,
  type ImageStore,
  type ImageTools,
  ImageToolsMissingError,
} from "../../server/images/mod.ts";
import {
  BASE_IMAGE_CONFIG,
  BASE_IMAGE_TAG,
  imageToolsWork,
  startTestRegistry,
  testBaseImage,
  type TestRegistry,
} from "../_helpers/images.ts";

const works = await imageToolsWork("the image store tests (test/images/image_store_test.ts)");
const IMAGE_NAME = "runplane-test/trixie:python3";

/** A logger whose messages the test reads. */
function recordingLogger(): { logger: ReturnType<typeof createLogger>; messages: string[] } {
  const messages: string[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split("\n").filter(Boolean)) messages.push(JSON.parse(line).msg);
      done();
    },
  });
  return { logger: createLogger({ level: "info", destination }), messages };
}

describe("the image store with a loopback registry", { skip: !works }, () => {
  let registry: TestRegistry;
  let tools: ImageTools;
  let dir: string;
  let store: ImageStore;
  let log: ReturnType<typeof recordingLogger>;
  let reference: string;

  before(async () => {
    const started = performance.now();
    const layout = await testBaseImage();
    console.error(`test base image ready in ${Math.round(performance.now() - started)} ms: ${layout}`);
    registry = await startTestRegistry();
    await registry.push(layout, { tag: BASE_IMAGE_TAG, name: IMAGE_NAME });
    reference = `${registry.host}/${IMAGE_NAME}`;
    tools = await findImageTools();
    dir = await mkdtemp(join(tmpdir(), "runplane-image-store-"));
    log = recordingLogger();
    store = createImageStore(dir, {
      tools,
      registries: [registry.host],
      insecureRegistries: [registry.host],
      logger: log.logger,
    });
  });

  after(async () => {
    await registry?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("pulls an image from an allowed registry over HTTP, once for concurrent pulls, with a stable digest", async () => {
    const [first, second] = await Promise.all([store.pull(reference), store.pull(reference)]);
    assert.match(first, /^sha256:[a-f0-9]{64}$/);
    assert.equal(second, first);
    assert.equal(log.messages.filter((message) => message === "image pulled").length, 1);
    assert.equal(await store.pull(reference), first, "a second pull resolves to the same digest");
    const index = JSON.parse(await readFile(join(dir, "oci", "index.json"), "utf8"));
    assert.ok(index.manifests.some((entry: { digest: string }) => entry.digest === first));
  });

  it("unpacks the image into a root whose os-release and python3 are the image's", async () => {
    const digest = await store.pull(reference);
    const root = await store.unpack(digest);
    assert.equal(root, join(dir, "roots", `sha256-${digest.slice("sha256:".length)}`));
    assert.match(await readFile(join(root, "etc", "os-release"), "utf8"), /VERSION_CODENAME=trixie/);
    assert.ok((await lstat(join(root, "usr", "bin", "python3"))).isSymbolicLink());
    assert.ok((await stat(join(root, "usr", "bin", "python3.13"))).isFile());
    assert.deepEqual((await readdir(join(dir, "roots"))).filter((name) => name.startsWith(".")), []);
  });

  it("reuses the unpacked root on later and concurrent calls", async () => {
    const digest = await store.pull(reference);
    const root = await store.unpack(digest);
    const marker = join(root, "etc", "runplane-test-marker");
    await writeFile(marker, "kept");
    const unpacked = log.messages.filter((message) => message === "image unpacked").length;
    const again = await Promise.all([store.unpack(digest), store.unpack(digest), store.unpack(digest)]);
    assert.deepEqual(again, [root, root, root]);
    assert.equal(await readFile(marker, "utf8"), "kept", "the same root, not a new unpack");
    assert.equal(log.messages.filter((message) => message === "image unpacked").length, unpacked);
  });

  it("never uses a half-made root a crash left behind", async () => {
    const digest = await store.pull(reference);
    const scratch = await mkdtemp(join(tmpdir(), "runplane-image-store-"));
    const other = join(scratch, "store");
    try {
      const crashed = createImageStore(other, {
        tools,
        registries: [registry.host],
        insecureRegistries: [registry.host],
        logger: log.logger,
      });
      assert.equal(await crashed.pull(reference), digest);
      const partial = join(other, "roots", `.partial-${digest.slice(7, 19)}-crashed`);
      await mkdir(join(partial, "etc"), { recursive: true });
      await writeFile(join(partial, "etc", "os-release"), "VERSION_CODENAME=half\n");
      const root = await crashed.unpack(digest);
      assert.notEqual(root, partial);
      assert.match(await readFile(join(root, "etc", "os-release"), "utf8"), /VERSION_CODENAME=trixie/);
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  it("reads the image's Env, Cmd, WorkingDir, ExposedPorts and User", async () => {
    const config = await store.config(await store.pull(reference));
    assert.deepEqual(config.env.filter((entry) => !entry.startsWith("PATH=")), BASE_IMAGE_CONFIG.env);
    assert.deepEqual(config.cmd, BASE_IMAGE_CONFIG.cmd);
    assert.equal(config.entrypoint, null);
    assert.equal(config.workingDir, BASE_IMAGE_CONFIG.workingDir);
    assert.deepEqual(config.exposedPorts, BASE_IMAGE_CONFIG.exposedPorts);
    assert.equal(config.user, BASE_IMAGE_CONFIG.user);
  });

  it("refuses a reference outside the allow-list, naming it, without pulling", async () => {
    await assert.rejects(store.pull("docker.io/library/python:3.12"), (error: Error) => {
      assert.ok(error instanceof ImageReferenceError);
      assert.match(error.message, /docker\.io\/library\/python:3\.12/);
      assert.match(error.message, /RUNPLANE_IMAGE_REGISTRIES/);
      return true;
    });
    await assert.rejects(store.pull(`${registry.host}/bad name`), ImageReferenceError);
  });

  it("does not fall back to plain HTTP for a registry that is not listed as insecure", async () => {
    const strict = createImageStore(dir, { tools, registries: [registry.host], logger: log.logger });
    await assert.rejects(strict.pull(`${registry.host}/${IMAGE_NAME}`), /skopeo copy exited/);
  });

  it("answers a clear error for an image that was never pulled", async () => {
    await assert.rejects(store.unpack(`sha256:${"0".repeat(64)}`), /has no blob sha256:0+: pull the image first/);
    await assert.rejects(store.config("sha256:nothex"), /is not an image digest/);
  });
});

describe("an image store on a host without the tools", () => {
  it("refuses to pull, naming what is missing", async () => {
    const store = createImageStore(join(tmpdir(), "runplane-image-store-never-made"), {
      tools: { paths: { skopeo: null, umoci: "/usr/bin/umoci", buildah: null, mmdebstrap: null }, missing: ["skopeo"] },
      registries: ["docker.io"],
      logger: createLogger({ level: "silent" }),
    });
    await assert.rejects(store.pull("python:3.12"), (error: Error) => {
      assert.ok(error instanceof ImageToolsMissingError);
      assert.match(error.message, /skopeo is not installed/);
      return true;
    });
  });

  it("refuses a folder that is not an absolute path", () => {
    const options = {
      tools: { paths: { skopeo: null, umoci: null, buildah: null, mmdebstrap: null }, missing: [] },
      registries: [],
      logger: createLogger({ level: "silent" }),
    };
    assert.throws(() => createImageStore("relative/images", options), /must be an absolute path/);
    assert.throws(() => createImageStore("", options), /must be an absolute path/);
    assert.throws(() => createImageStore("/", options), /must be an absolute path other than \//);
  });
});
