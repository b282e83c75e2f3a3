/**
 * One project's GitHub REST API (see _github.ts): its base URL and token, a JSON `GET` bounded in time,
 * and the problem each answer that is not a success becomes.
 */
import { startDeadline } from "../deadline/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import { assertRepoCoordinates } from "./_repo_names.ts";
import type { RepoCoordinates } from "./_tree_types.ts";

/** The public GitHub API; GitHub Enterprise Server uses `https://<host>/api/v3`. */
export const GITHUB_API_URL = "https://api.github.com";

/** Options of `createGithubProvider`. */
export interface GithubProviderOptions {
  /** The token, sent as `Authorization: Bearer <token>`; never logged. */
  token: string;
  /** The API's base URL (default `https://api.github.com`). */
  apiUrl?: string;
  /** Gives up on one GitHub request after this many ms (default 30 s). */
  timeoutMs?: number;
}

/** What to say for GitHub answers that mean "not there". */
export interface Missing {
  notFound: string;
  unprocessable?: string;
  conflict?: string;
}

const OBJECT_ID = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

function retryAfterSeconds(headers: Headers): number {
  const retryAfter = headers.get("retry-after");
  if (retryAfter && /^\d+$/.test(retryAfter.trim())) return Math.max(1, Number(retryAfter));
  const reset = headers.get("x-ratelimit-reset");
  if (reset && /^\d+$/.test(reset.trim())) return Math.max(1, Math.ceil(Number(reset) - Date.now() / 1000));
  return 60;
}

function isRateLimited(response: Response): boolean {
  if (response.status === 429) return true;
  return response.status === 403
    && (response.headers.has("retry-after") || response.headers.get("x-ratelimit-remaining") === "0");
}

/** `value` when it is a git object id; else GitHub answered wrong (a 502 problem naming `what`). */
export function objectId(value: unknown, what: string): string {
  if (typeof value !== "string" || !OBJECT_ID.test(value)) {
    throw new ProblemError("bad-gateway", `GitHub answered without a valid ${what} sha`);
  }
  return value;
}

/** GitHub's API (or GitHub Enterprise Server's) as one token reads it. */
export class GithubApi {
  /** The API's base URL, without a trailing slash. */
  readonly apiUrl: string;
  /** The API's host, as problems name it. */
  readonly host: string;
  /** The headers of every request. */
  readonly headers: Record<string, string>;
  readonly #timeoutMs: number | undefined;

  constructor(options: GithubProviderOptions) {
    this.apiUrl = (options.apiUrl ?? GITHUB_API_URL).replace(/\/+$/, "");
    this.host = new URL(this.apiUrl).host;
    this.headers = {
      Accept: "application/vnd.github+json",
      Authorization: `Bearer ${options.token}`,
      "User-Agent": "runplane",
      "X-GitHub-Api-Version": "2022-11-28",
    };
    this.#timeoutMs = options.timeoutMs;
  }

  /** `GET path` as JSON; an answer that is not a success throws its problem (`missing` for a 404, 422, 409). */
  async get<T>(path: string, options: { missing: Missing; signal?: AbortSignal }): Promise<T> {
    const { apiUrl, headers, host } = this;
    const deadline = startDeadline(this.#timeoutMs ?? 30_000, { signal: options.signal });
    let response: Response;
    try {
      response = await fetch(`${apiUrl}${path}`, { headers, signal: deadline.signal });
    } catch (error) {
      deadline.clear();
      const reason = deadline.timedOut
        ? "it did not answer in time"
        : ((error as Error).cause as Error | undefined)?.message ?? (error as Error).message;
      throw new ProblemError("bad-gateway", `Could not reach GitHub at ${host}: ${reason}; try again later`);
    }
    if (response.ok) {
      try {
        return (await response.json()) as T;
      } catch {
        const reason = deadline.timedOut ? "did not finish its answer in time" : "answered with malformed JSON";
        throw new ProblemError("bad-gateway", `GitHub at ${host} ${reason} for ${path.split("?")[0]}; try again later`);
      } finally {
        deadline.clear();
      }
    }
    deadline.clear();
    return await this.failed(response, options.missing);
  }

  /** Throws the problem for a GitHub answer that is not a success. */
  async failed(response: Response, missing: Missing): Promise<never> {
    const { host } = this;
    await response.body?.cancel();
    if (isRateLimited(response)) {
      const seconds = retryAfterSeconds(response.headers);
      throw new ProblemError(
        "service-unavailable",
        `GitHub's rate limit for this project's token is exhausted; try again in ${seconds} seconds`,
        {
          headers: { "Retry-After": String(seconds) },
        },
      );
    }
    if (response.status === 404) throw new ProblemError("not-found", missing.notFound);
    if (response.status === 422 && missing.unprocessable) throw new ProblemError("not-found", missing.unprocessable);
    if (response.status === 409 && missing.conflict) throw new ProblemError("not-found", missing.conflict);
    if (response.status === 401) {
      throw new ProblemError(
        "bad-gateway",
        `GitHub at ${host} rejected the project's token (401): set a valid one with runplane integration github`,
      );
    }
    throw new ProblemError("bad-gateway", `GitHub at ${host} answered ${response.status}; try again later`);
  }

  /** The API path of a repository (`/repos/{o}/{r}`), its coordinates checked. */
  repoPath(coordinates: RepoCoordinates): string {
    assertRepoCoordinates(coordinates);
    return `/repos/${encodeURIComponent(coordinates.owner)}/${encodeURIComponent(coordinates.repo)}`;
  }
}
