/**
 * The real parts the image tests need: Debian's image tools, a base image made locally (mmdebstrap's
 * trixie minbase (Debian 13: another release and Python than the host's bookworm) with python3, turned into an OCI image by umoci) and kept in a cache folder between runs
 * so a machine pays for it once, and a registry of the test's own on loopback (Debian's `docker-registry`).
 */
import { execFile, spawn } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { isAbsolute, join } from "node:path";
import { findImageTools } from "../../server/images/mod.ts";
import { freePort } from "../../server/runtime/free_port.ts";

const REQUIRED = process.env.RUNPLANE_TEST_REQUIRE_IMAGES === "1";

/** Where built test images are kept between runs (`RUNPLANE_TEST_IMAGE_CACHE` moves it). */
export const TEST_IMAGE_CACHE = process.env.RUNPLANE_TEST_IMAGE_CACHE ?? "/var/cache/runplane-test-images";

/** The cache entry of the base image; a new name when the recipe below changes. */
const BASE_IMAGE_KEY = "trixie-python3-slim-v4";
/** The tag of the base image in its cached OCI layout. */
export const BASE_IMAGE_TAG = "trixie";

/** What the base image's config says, so tests can check that the store reads it. */
export const BASE_IMAGE_CONFIG = {
  // An app may get the first; the others pass through the jail's root processes and are left out.
  env: ["IMAGE_GREETING=from the image", "LD_PRELOAD=/usr/lib/not-loaded.so", "RUNPLANE_TEST_IMAGE=trixie"],
  cmd: ["python3", "-c", "print('hello from the image')"],
  workingDir: "/srv",
  exposedPorts: ["8080/tcp"],
  user: "1000",
};

const OTHER_TOOLS = ["mmdebstrap", "docker-registry", "flock"];

function skipLoudly(what: string, problem: string): false {
  const message = `${what}: ${problem}`;
  if (REQUIRED) throw new Error(`${message}, and RUNPLANE_TEST_REQUIRE_IMAGES=1 requires it`);
  console.error(
    `\n*** SKIPPED ${message}.\n*** Install them (apt-get install skopeo umoci mmdebstrap docker-registry);\n`
      + `*** RUNPLANE_TEST_REQUIRE_IMAGES=1 fails instead of skipping.\n`,
  );
  return false;
}

function which(name: string): Promise<boolean> {
  return new Promise((resolve) => {
    execFile("sh", ["-c", 'command -v "$1"', "sh", name], { env: { PATH: `${process.env.PATH}:/usr/sbin:/sbin` } }, (
      error,
    ) => resolve(!error));
  });
}

/** Whether every part the image tests need is here; otherwise says loudly that `what` was skipped (or throws in CI). */
export async function imageToolsWork(what: string): Promise<boolean> {
  const tools = await findImageTools();
  const missing: string[] = [...tools.missing];
  for (const name of OTHER_TOOLS) if (!await which(name)) missing.push(name);
  if (process.getuid?.() !== 0) missing.push("root (mmdebstrap and the cache folder)");
  return missing.length === 0 ? true : skipLoudly(what, `missing ${missing.join(", ")}`);
}

function run(command: string, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { timeout: timeoutMs, killSignal: "SIGKILL", maxBuffer: 64 << 20 }, (error, out, err) => {
      if (error) reject(new Error(`${command} ${args.slice(0, 3).join(" ")} failed: ${error.message}\n${err}`));
      else resolve(out);
    });
  });
}

/**
 * Builds the base image into the cache unless it is there. Run under `flock` on the cache's lock, so
 * concurrent test processes build it once; it is built in a `.partial-` folder and renamed whole, so a build
 * a crash cut short is never used (the next build, holding the lock, removes such folders: nobody else can
 * be writing them).
 */
const BUILD_SCRIPT = String.raw`
set -euo pipefail
cache="$1"; key="$2"; tag="$3"
case "$cache" in /?*) ;; *) echo "the cache folder must be absolute" >&2; exit 1 ;; esac
final="$cache/$key"
if [ -f "$final/oci/index.json" ]; then exit 0; fi
for stale in "$cache"/.partial-*; do
  case "$stale" in "$cache"/.partial-?*) if [ -d "$stale" ]; then rm -rf -- "$stale"; fi ;; esac
done
tmp="$(mktemp -d "$cache/.partial-$key-XXXXXX")"
case "$tmp" in "$cache"/.partial-?*) ;; *) exit 1 ;; esac
trap 'rm -rf -- "$tmp"' EXIT
started=$(date +%s)
# Slim, as Debian's -slim images are: dpkg leaves out manuals, translations and docs (a third of the files
# every test that unpacks or copies the image would write), here and in whatever apt installs in the image.
mmdebstrap --quiet --variant=minbase --include=python3 --format=tar \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  trixie "$tmp/root.tar" http://deb.debian.org/debian
umoci init --layout "$tmp/oci"
umoci new --image "$tmp/oci:$tag"
umoci raw add-layer --image "$tmp/oci:$tag" "$tmp/root.tar"
umoci config --image "$tmp/oci:$tag" \
  --config.env "IMAGE_GREETING=from the image" --config.env LD_PRELOAD=/usr/lib/not-loaded.so \
  --config.env RUNPLANE_TEST_IMAGE=trixie \
  --config.cmd python3 --config.cmd -c --config.cmd "print('hello from the image')" \
  --config.workingdir /srv --config.exposedports 8080/tcp --config.user 1000
umoci gc --layout "$tmp/oci"
rm -f -- "$tmp/root.tar"
chmod 755 "$tmp"
mv -T -- "$tmp" "$final"
trap - EXIT
echo "built in $(( $(date +%s) - started )) s"
`;

let baseImage: Promise<string> | undefined;

/**
 * The OCI layout holding the base image (tag {@link BASE_IMAGE_TAG}): Debian trixie minbase with python3,
 * built by mmdebstrap from Debian's archive on the first run on a machine (about a minute here) and taken
 * from {@link TEST_IMAGE_CACHE} after that.
 */
export function testBaseImage(): Promise<string> {
  baseImage ??= (async () => {
    if (!isAbsolute(TEST_IMAGE_CACHE)) {
      throw new Error(`RUNPLANE_TEST_IMAGE_CACHE must be absolute: ${TEST_IMAGE_CACHE}`);
    }
    await mkdir(TEST_IMAGE_CACHE, { recursive: true });
    const lock = join(TEST_IMAGE_CACHE, ".lock");
    const args = [
      "-w",
      "1800",
      lock,
      "bash",
      "-c",
      BUILD_SCRIPT,
      "bash",
      TEST_IMAGE_CACHE,
      BASE_IMAGE_KEY,
      BASE_IMAGE_TAG,
    ];
    const said = (await run("flock", args, 30 * 60_000)).trim();
    const layout = join(TEST_IMAGE_CACHE, BASE_IMAGE_KEY, "oci");
    if (said) console.error(`test base image ${said}: ${layout}`);
    return layout;
  })();
  return baseImage;
}

/** A registry of the test's own, on loopback, over plain HTTP. */
export interface TestRegistry {
  /** `127.0.0.1:<port>`: the registry part of references to its images. */
  host: string;
  /** Copies the image `tag` of the OCI layout `layout` into the registry as `name` (`team/image:tag`). */
  push(layout: string, options: { tag: string; name: string }): Promise<void>;
  close(): Promise<void>;
}

async function answers(url: string): Promise<boolean> {
  try {
    return (await fetch(url, { signal: AbortSignal.timeout(1000) })).ok;
  } catch {
    return false;
  }
}

async function serveRegistry(dir: string): Promise<{ host: string; stop: () => void } | null> {
  const host = `127.0.0.1:${await freePort()}`;
  const config = join(dir, `config-${host.split(":")[1]}.yml`);
  const storage = join(dir, "storage");
  await writeFile(
    config,
    `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${storage}\n  delete:\n    enabled: true\nhttp:\n  addr: ${host}\n`,
  );
  // Its log (a 404 for every blob a push asks about first) is kept to explain a registry that did not start.
  const child = spawn("docker-registry", ["serve", config], { stdio: ["ignore", "ignore", "pipe"] });
  let said = "";
  child.stderr!.on("data", (chunk) => said = `${said}${chunk}`.slice(-4000));
  let exited = false;
  child.once("exit", () => exited = true);
  child.once("error", () => exited = true);
  for (let i = 0; i < 100 && !exited; i++) {
    if (await answers(`http://${host}/v2/`)) return { host, stop: () => child.kill("SIGKILL") };
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  child.kill("SIGKILL");
  console.error(`docker-registry did not answer on ${host}: ${said}`);
  return null;
}

/** Starts Debian's `docker-registry` on a free loopback port, its storage in a temporary folder. */
export async function startTestRegistry(): Promise<TestRegistry> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-test-registry-"));
  // Another process may take the free port before the registry binds it: a few tries with new ports.
  let served: Awaited<ReturnType<typeof serveRegistry>> = null;
  for (let attempt = 0; attempt < 3 && !served; attempt++) served = await serveRegistry(dir);
  if (!served) {
    await rm(dir, { recursive: true, force: true });
    throw new Error("docker-registry did not start on loopback");
  }
  const { host, stop } = served;
  return {
    host,
    async push(layout, options) {
      const args = ["--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false", "--dest-no-creds"];
      await run("skopeo", [...args, `oci:${layout}:${options.tag}`, `docker://${host}/${options.name}`], 5 * 60_000);
    },
    async close() {
      stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Unpacks the test base image into `root` (which must not exist) with umoci, as the image store does. */
export async function unpackTestImage(root: string): Promise<void> {
  await run(
    "umoci",
    ["raw", "unpack", "--rootless", "--image", `${await testBaseImage()}:${BASE_IMAGE_TAG}`, root],
    10 * 60_000,
  );
}
