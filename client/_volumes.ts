/**
 * A project's volumes and their files on the REST API: made, listed, deleted; files uploaded and downloaded
 * as streams (never held whole), listed by prefix. JSON calls and file streams both go through `fetch`
 * with the token; a refusal is a `RunplaneError` carrying the problem document.
 */
import type { components } from "../generated/api.d.ts";
import { errorFromResponse } from "./runplane_error.ts";
import type { RunplaneFetch } from "./safe_retry.ts";

/** A volume as the server answers it (the contract's `Volume`). */
export type VolumeInfo = components["schemas"]["Volume"];

/** A file of a volume as listed (the contract's `VolumeFile`). */
export type VolumeFileInfo = components["schemas"]["VolumeFile"];

/** An uploaded file: its path, size and SHA-256 (the contract's `VolumeFileWritten`). */
export type VolumeFileWritten = components["schemas"]["VolumeFileWritten"];

/** Where the volumes calls go. */
export interface VolumesClientOptions {
  baseUrl: string;
  token?: string;
  /** Replaces `globalThis.fetch`, as the client's own option does. */
  fetch?: RunplaneFetch;
}

function encodePath(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

/** The volumes calls of a client. */
export class VolumesClient {
  readonly #base: string;
  readonly #token: string | undefined;
  readonly #fetch: RunplaneFetch;

  constructor(options: VolumesClientOptions) {
    this.#base = options.baseUrl.replace(/\/+$/, "");
    this.#token = options.token;
    this.#fetch = options.fetch ?? ((request) => fetch(request));
  }

  async #call(method: string, path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.#token) headers.set("Authorization", `Bearer ${this.#token}`);
    const response = await this.#fetch(new Request(`${this.#base}${path}`, { ...init, method, headers }));
    if (!response.ok) throw await errorFromResponse(response);
    return response;
  }

  #volume(project: string, name: string): string {
    return `/v3/projects/${encodeURIComponent(project)}/volumes/${encodeURIComponent(name)}`;
  }

  /** Makes a volume of `sizeGb` GiB; `created` false when it existed with that size. */
  async create(project: string, name: string, sizeGb: number, call: { signal?: AbortSignal } = {}) {
    const response = await this.#call("PUT", this.#volume(project, name), {
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ size_gb: sizeGb }),
      signal: call.signal,
    });
    return { created: response.status === 201, volume: (await response.json()) as VolumeInfo };
  }

  /** The project's volumes. */
  async list(project: string, call: { signal?: AbortSignal } = {}): Promise<VolumeInfo[]> {
    const response = await this.#call("GET", `/v3/projects/${encodeURIComponent(project)}/volumes`, call);
    return ((await response.json()) as { volumes: VolumeInfo[] }).volumes;
  }

  /** Deletes a volume and its files. */
  async delete(project: string, name: string, call: { signal?: AbortSignal } = {}): Promise<void> {
    await this.#call("DELETE", this.#volume(project, name), call);
  }

  /** Every file of the volume whose path starts with `prefix`, page after page. */
  async *files(project: string, name: string, prefix = "", call: { signal?: AbortSignal } = {}) {
    let cursor: string | null = null;
    do {
      const query = new URLSearchParams({ prefix, ...(cursor ? { cursor } : {}) });
      const response = await this.#call("GET", `${this.#volume(project, name)}/files?${query}`, call);
      const page = (await response.json()) as { files: VolumeFileInfo[]; next_cursor: string | null };
      yield* page.files;
      cursor = page.next_cursor;
    } while (cursor);
  }

  /** The file at `path`, or undefined. */
  async stat(project: string, name: string, path: string): Promise<VolumeFileInfo | undefined> {
    for await (const file of this.files(project, name, path)) if (file.path === path) return file;
    return undefined;
  }

  /** Uploads `body` (`size` bytes) to `path`; resolves with what the server wrote. */
  async upload(
    project: string,
    name: string,
    file: { path: string; size: number; body: AsyncIterable<Uint8Array>; signal?: AbortSignal },
  ): Promise<VolumeFileWritten> {
    const response = await this.#call("PUT", `${this.#volume(project, name)}/files/${encodePath(file.path)}`, {
      headers: { "Content-Type": "application/octet-stream", "Content-Length": String(file.size) },
      body: file.body as unknown as BodyInit,
      duplex: "half",
      signal: file.signal,
    } as RequestInit);
    return (await response.json()) as VolumeFileWritten;
  }

  /** Opens the file at `path` as a stream of bytes, with its size and sha256 (ETag) when known. */
  async download(project: string, name: string, path: string, call: { signal?: AbortSignal } = {}) {
    const response = await this.#call("GET", `${this.#volume(project, name)}/files/${encodePath(path)}`, call);
    const etag = response.headers.get("etag")?.replace(/"/g, "");
    return {
      size: Number(response.headers.get("content-length") ?? "0"),
      sha256: etag || undefined,
      body: response.body as unknown as AsyncIterable<Uint8Array>,
    };
  }

  /** Deletes the file at `path`. */
  async deleteFile(project: string, name: string, path: string, call: { signal?: AbortSignal } = {}): Promise<void> {
    await this.#call("DELETE", `${this.#volume(project, name)}/files/${encodePath(path)}`, call);
  }
}
