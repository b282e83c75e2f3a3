/**
 * An app's deployments on the REST API: deploying a bundle or a repository folder (with upload progress),
 * reading, listing and activating deployments, and their build logs, read or followed.
 */
import { type ClientContext, unwrap } from "./_client_context.ts";
import { appPath, deploymentPath } from "./_paths.ts";
import type { AppRef } from "./app_ref.ts";
import { readServerEvents } from "./event_stream.ts";
import { errorFromResponse } from "./runplane_error.ts";
import type { BuildLogEvent, CreateDeploymentOptions, Deployment, DeploymentPage, DeploymentSource } from "./types.ts";

/** The size of the chunks a bundle is uploaded in when its progress is reported. */
const UPLOAD_CHUNK_BYTES = 256 * 1024;

/** `bytes` as a stream of 256 KiB chunks, reporting each one as the connection pulls it. */
function uploadStream(
  bytes: Uint8Array,
  onProgress: (sent: number, total: number) => void,
): ReadableStream<Uint8Array> {
  let sent = 0;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent >= bytes.length) return controller.close();
      const chunk = bytes.subarray(sent, sent + UPLOAD_CHUNK_BYTES);
      sent += chunk.length;
      controller.enqueue(chunk);
      onProgress(sent, bytes.length);
    },
  });
}

/** The deployment calls of a client. */
export class Deployments {
  readonly #client: ClientContext;

  /** Calls over `client`'s REST API. */
  constructor(client: ClientContext) {
    this.#client = client;
  }

  /** Deploys an app: a bundle (the folder as a gzip tarball) or a repository folder. */
  createDeployment(
    app: AppRef,
    body: Uint8Array | { source: DeploymentSource },
    call: CreateDeploymentOptions = {},
  ): Promise<Deployment> {
    const query = { message: call.message, commit: call.commit, dirty: call.dirty };
    const params = { path: appPath(app), query };
    if (!(body instanceof Uint8Array)) {
      return unwrap(this.#client.api.POST("/v3/projects/{project_id}/apps/{app_id}/deployments", {
        params,
        body,
        headers: { "Content-Type": "application/json" },
        signal: call.signal,
      }));
    }
    const progress = call.onUploadProgress;
    return unwrap(this.#client.api.POST("/v3/projects/{project_id}/apps/{app_id}/deployments", {
      params,
      // The bytes go as they are (or as a stream that reports how much was taken, for a progress bar).
      body,
      bodySerializer: (bytes: unknown) => progress ? uploadStream(bytes as Uint8Array, progress) : (bytes as BodyInit),
      // fetch sets a byte body's Content-Length itself; a stream's is named here so the server still gets
      // a length (no chunked upload). A second Content-Length beside fetch's own is refused by undici 7
      // when it is the dispatcher of Node 20's fetch, as it is once the npm undici package is loaded.
      headers: progress
        ? { "Content-Type": "application/gzip", "Content-Length": String(body.length) }
        : { "Content-Type": "application/gzip" },
      signal: call.signal,
      ...(progress ? { duplex: "half" } : {}),
    }));
  }

  /** One deployment of an app. */
  getDeployment(app: AppRef, deploymentId: string, call: { signal?: AbortSignal } = {}): Promise<Deployment> {
    return unwrap(this.#client.api.GET("/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}", {
      params: { path: deploymentPath(app, deploymentId) },
      signal: call.signal,
    }));
  }

  /** A page of an app's deployments, newest first. */
  listDeployments(
    app: AppRef,
    call: { limit?: number; cursor?: string; signal?: AbortSignal } = {},
  ): Promise<DeploymentPage> {
    return unwrap(this.#client.api.GET("/v3/projects/{project_id}/apps/{app_id}/deployments", {
      params: { path: appPath(app), query: { limit: call.limit, cursor: call.cursor } },
      signal: call.signal,
    }));
  }

  /** Makes a `ready` deployment the active one (a rollback, or a roll forward). */
  activateDeployment(app: AppRef, deploymentId: string, call: { signal?: AbortSignal } = {}): Promise<Deployment> {
    return unwrap(
      this.#client.api.POST("/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}/activate", {
        params: { path: deploymentPath(app, deploymentId) },
        signal: call.signal,
      }),
    );
  }

  /** A deployment's build log so far, as text. */
  deploymentLogs(app: AppRef, deploymentId: string, call: { signal?: AbortSignal } = {}): Promise<string> {
    return unwrap(this.#client.api.GET("/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}/logs", {
      params: { path: deploymentPath(app, deploymentId), header: { accept: "text/plain" } },
      parseAs: "text",
      signal: call.signal,
    })) as Promise<string>;
  }

  /** Follows a build's log line by line, then yields the deployment once the build has ended. */
  async *followDeploymentLogs(
    app: AppRef,
    deploymentId: string,
    call: { signal?: AbortSignal } = {},
  ): AsyncGenerator<BuildLogEvent, void, undefined> {
    const { response, error } = await this.#client.api.GET(
      "/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}/logs",
      {
        params: { path: deploymentPath(app, deploymentId), header: { accept: "text/event-stream" } },
        parseAs: "stream",
        signal: call.signal,
      },
    );
    if (!response.ok || !response.body) throw await errorFromResponse(response, error);
    for await (const { event, data } of readServerEvents(response.body)) {
      if (event === "end") {
        yield { end: JSON.parse(data) as Deployment } satisfies BuildLogEvent;
        return;
      }
      if (event === "message") yield { line: data } satisfies BuildLogEvent;
    }
  }
}
