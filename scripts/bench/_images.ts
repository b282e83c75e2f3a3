/**
 * The image parts of the images scenario: the test base image (Debian trixie + python3) as the image tests
 * build and cache it (test/_helpers/images.ts: `RUNPLANE_TEST_IMAGE_CACHE`, /var/cache/runplane-test-images
 * by default), and Debian's `docker-registry` on a loopback port, pushed to by skopeo.
 */
import { execFile, spawn } from "node:child_process";
import { access, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../server/runtime/free_port.ts";

/** The tag of the base image in its layout. */
export const BENCH_IMAGE_TAG = "trixie";

/** The OCI layout of the test base image; throws, saying how to make it, when the image tests never ran here. */
export async function benchBaseImage(): Promise<string> {
  const cache = process.env.RUNPLANE_TEST_IMAGE_CACHE ?? "/var/cache/runplane-test-images";
  const layout = join(cache, "trixie-python3-v3", "oci");
  try {
    await access(join(layout, "index.json"));
  } catch {
    throw new Error(
      `No test base image at ${layout}: run npx tsx --test test/images/image_store_test.ts once to build it`,
    );
  }
  return layout;
}

/** A loopback registry; `push` copies a layout's tag into it as `name`. */
export interface BenchRegistry {
  host: string;
  push(layout: string, options: { tag: string; name: string }): Promise<void>;
  close(): Promise<void>;
}

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) =>
    execFile(
      command,
      args,
      { timeout: 300_000 },
      (error, _out, err) => error ? reject(new Error(`${command}: ${err}`)) : resolve(),
    )
  );
}

/** Starts `docker-registry` on a free loopback port, its storage in a temporary folder. */
export async function startBenchRegistry(): Promise<BenchRegistry> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-bench-registry-"));
  const host = `127.0.0.1:${await freePort()}`;
  const config = join(dir, "config.yml");
  await writeFile(
    config,
    `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${
      join(dir, "storage")
    }\nhttp:\n  addr: ${host}\n`,
  );
  const child = spawn("docker-registry", ["serve", config], { stdio: "ignore" });
  const close = async () => {
    child.kill("SIGKILL");
    await rm(dir, { recursive: true, force: true });
  };
  for (let i = 0;; i++) {
    const ok = await fetch(`http://${host}/v2/`, { signal: AbortSignal.timeout(1000) }).then((r) => r.ok, () => false);
    if (ok) break;
    if (i > 100) {
      await close();
      throw new Error(`docker-registry did not answer on ${host}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    host,
    push: (layout, options) =>
      run("skopeo", [
        "--insecure-policy",
        "copy",
        "--quiet",
        "--dest-tls-verify=false",
        `oci:${layout}:${options.tag}`,
        `docker://${host}/${options.name}`,
      ]),
    close,
  };
}
