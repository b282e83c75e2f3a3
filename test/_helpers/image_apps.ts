/**
 * A test server that runs apps in images: the test base image (test/_helpers/images.ts) pushed to a
 * registry of the test's own on loopback, which the server is allowed to pull from over plain HTTP, and a
 * client of its deploy and run APIs.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packBundle } from "../../client/bundle.ts";
import { checkedFetch } from "./contract.ts";
import { BASE_IMAGE_TAG, startTestRegistry, type TestRegistry, testBaseImage } from "./images.ts";
import { startTestServer, TEST_PROJECT, type TestServer, type TestServerOptions } from "./server.ts";

/** A deployment as the REST API shows it (the fields these tests read). */
export type ImageDeployment = {
  deployment_id: string;
  status: string;
  error: string | null;
  image?: { reference: string; digest: string } | null;
};

/** The name the base image is pushed as. */
export const TEST_IMAGE_NAME = "runplane-test/trixie:python3";

/**
 * Whether Debian's archive answers: apt in an image needs it. Asked up to three times, 10 s each: on a
 * loaded machine one slow answer skipped a whole suite in CI.
 */
export async function debianReachable(): Promise<boolean> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const url = "http://deb.debian.org/debian/dists/trixie/Release";
      if ((await fetch(url, { signal: AbortSignal.timeout(10_000) })).ok) return true;
    } catch {
      // Asked again below.
    }
  }
  return false;
}

/** Whether `name` is a command on this host. */
export function hostHas(name: string): Promise<boolean> {
  return new Promise((resolve) => execFile("sh", ["-c", 'command -v "$1"', "sh", name], (error) => resolve(!error)));
}

async function bundleOf(files: Record<string, string>): Promise<Uint8Array> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-image-bundle-"));
  try {
    for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
    return (await packBundle(dir)).bytes;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A server allowed to pull from a loopback registry holding the test image, and what calls it. */
export interface ImageAppsServer {
  server: TestServer;
  registry: TestRegistry;
  /** The test image's reference on that registry. */
  reference: string;
  /** A token of the test project with the deploy, rest and run scopes. */
  token: string;
  request(path: string, init?: RequestInit): Promise<Response>;
  deploy(appId: string, files: Record<string, string>): Promise<Response>;
  /** Deploys and waits until the build ends; the deployment and its build log. */
  deployed(appId: string, files: Record<string, string>): Promise<{ deployment: ImageDeployment; log: string }>;
  /** Waits until the deployment's build ends. */
  built(appId: string, id: string): Promise<ImageDeployment>;
  buildLog(appId: string, id: string): Promise<string>;
  /** Calls `fn` of the app with `{}`; the status and the body. */
  call(appId: string, fn?: string): Promise<{ status: number; body: { result?: Record<string, unknown> } }>;
  close(): Promise<void>;
}

/** Options of {@link startImageAppsServer}. */
export interface ImageAppsServerOptions {
  /** Added to the server's settings. */
  env?: Record<string, string>;
  /** A fake GPU host's folders (see test/_helpers/gpus.ts). */
  gpuPaths?: TestServerOptions["gpuPaths"];
  /** Another server's registry, shared (closed by that server, not this one); a new one by default. */
  registry?: TestRegistry;
  /** Makes the registry the cluster's shared one too (`RUNPLANE_REGISTRY=<host>/runplane`). */
  shareRegistry?: boolean;
}

/** Starts the registry (unless given) and the server. */
export async function startImageAppsServer(options: ImageAppsServerOptions = {}): Promise<ImageAppsServer> {
  const registry = options.registry ?? await startTestRegistry();
  const closeRegistry = () => options.registry ? Promise.resolve() : registry.close();
  let server: TestServer;
  try {
    if (!options.registry) await registry.push(await testBaseImage(), { tag: BASE_IMAGE_TAG, name: TEST_IMAGE_NAME });
    const shared: Record<string, string> = options.shareRegistry
      ? { RUNPLANE_REGISTRY: `${registry.host}/runplane` }
      : {};
    server = await startTestServer({
      env: {
        RUNPLANE_IMAGE_REGISTRIES: registry.host,
        RUNPLANE_INSECURE_REGISTRIES: registry.host,
        ...shared,
        ...options.env,
      },
      gpuPaths: options.gpuPaths,
    });
  } catch (error) {
    await closeRegistry();
    throw error;
  }
  const token = (await server.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
  const request = (path: string, init: RequestInit = {}) =>
    checkedFetch(`${server.url}${path}`, { ...init, headers: { Authorization: `Bearer ${token}`, ...init.headers } });
  const apps = `/v3/projects/${TEST_PROJECT}/apps`;
  const self: ImageAppsServer = {
    server,
    registry,
    reference: `${registry.host}/${TEST_IMAGE_NAME}`,
    token,
    request,
    deploy: async (appId, files) =>
      await request(`${apps}/${appId}/deployments`, {
        method: "POST",
        headers: { "Content-Type": "application/gzip" },
        body: new Uint8Array(await bundleOf(files)),
      }),
    async built(appId, id) {
      for (const started = Date.now(); Date.now() - started < 600_000;) {
        const deployment = (await (await request(`${apps}/${appId}/deployments/${id}`)).json()) as ImageDeployment;
        if (deployment.status === "ready" || deployment.status === "failed") return deployment;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      throw new Error(`deployment ${id} did not finish building`);
    },
    buildLog: async (appId, id) => await (await request(`${apps}/${appId}/deployments/${id}/logs`)).text(),
    async deployed(appId, files) {
      const response = await self.deploy(appId, files);
      if (response.status !== 202) throw new Error(`deploy answered ${response.status}: ${await response.text()}`);
      const { deployment_id } = (await response.json()) as ImageDeployment;
      const deployment = await self.built(appId, deployment_id);
      return { deployment, log: await self.buildLog(appId, deployment_id) };
    },
    async call(appId, fn = "run") {
      const response = await request(`/v4/${TEST_PROJECT}/${appId}/${fn}`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: "{}",
      });
      return { status: response.status, body: (await response.json()) as { result?: Record<string, unknown> } };
    },
    async close() {
      await server.close();
      await closeRegistry();
    },
  };
  return self;
}
