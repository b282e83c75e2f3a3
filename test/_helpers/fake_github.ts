/**
 * A GitHub REST API on loopback that answers with GitHub's wire format: `GET /repos/{o}/{r}`,
 * `GET /repos/{o}/{r}/commits/{ref}`, `GET /repos/{o}/{r}/git/trees/{sha}[?recursive=1]` (truncating
 * where told to, as GitHub does past its limit), `GET /repos/{o}/{r}/tarball/{ref}` (a 302 to a
 * codeload-like address serving a gzip tarball with one `owner-repo-sha/` folder, as GitHub does),
 * 404/409/422 bodies, rate limits and 500s. It records every request.
 */
import { createHash } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";
import { pack } from "tar-stream";

/** One object of a fake tree: a blob, a submodule commit, or a subtree. */
export type FakeNode =
  | { kind: "blob"; mode?: "100644" | "100755" | "120000"; content: string }
  | { kind: "commit"; sha: string }
  | { kind: "tree"; children: Record<string, FakeNode> };

/** A fake repository. */
export interface FakeRepo {
  defaultBranch: string;
  /** Each ref (branch, tag or full sha) and the root tree of its commit; none for an empty repository. */
  refs: Record<string, Record<string, FakeNode>>;
  /** Tree paths ("" for the root) whose recursive listing GitHub truncates. */
  truncate?: string[];
  /** Answer every request with this instead: a rate limit or a server error. */
  failure?: "rate-limit" | "secondary-rate-limit" | "server-error";
}

/** A recorded request. */
export interface FakeRequest {
  path: string;
  headers: IncomingHttpHeaders;
}

/** A running fake GitHub. */
export interface FakeGithub {
  /** The API base URL, e.g. `http://127.0.0.1:1234/api/v3` (GitHub Enterprise's layout). */
  apiUrl: string;
  requests: FakeRequest[];
  /** The commit sha a ref resolves to. */
  commitOf(repo: string, ref: string): string;
  /** The root tree's sha of a ref's commit. */
  treeOf(repo: string, ref: string): string;
  /** The entries the API should answer for a ref, sorted by path. */
  expectedEntries(
    repo: string,
    ref: string,
  ): Array<{ path: string; type: string; mode: string; sha: string; size?: number }>;
  close(): Promise<void>;
}

interface Stored {
  sha: string;
  node: FakeNode;
}

function sha1(text: string): string {
  return createHash("sha1").update(text).digest("hex");
}

const PREFIX = "/api/v3";

/** Starts the fake with `repos` by `owner/repo`. */
export async function startFakeGithub(repos: Record<string, FakeRepo>): Promise<FakeGithub> {
  const objects = new Map<string, Stored>();
  function store(node: FakeNode): string {
    const sha = node.kind === "commit" ? node.sha : node.kind === "blob" ? sha1(`blob ${node.content}`) : sha1(
      `tree ${Object.entries(node.children).map(([name, child]) => `${name}:${store(child)}`).join(",")}`,
    );
    objects.set(sha, { sha, node });
    return sha;
  }
  const commits = new Map<string, { sha: string; tree: string }>();
  for (const [name, repo] of Object.entries(repos)) {
    for (const [ref, root] of Object.entries(repo.refs)) {
      const tree = store({ kind: "tree", children: root });
      commits.set(`${name}@${ref}`, { sha: sha1(`commit ${name} ${ref} ${tree}`), tree });
    }
  }
  const requests: FakeRequest[] = [];

  function modeOf(node: FakeNode): string {
    return node.kind === "tree" ? "040000" : node.kind === "commit" ? "160000" : node.mode ?? "100644";
  }
  function typeOf(node: FakeNode): string {
    return node.kind;
  }
  /** GitHub's items of a tree: one level, or every level with paths from the tree's root. */
  function items(treeSha: string, recursive: boolean, prefix = ""): Array<Record<string, unknown>> {
    const tree = objects.get(treeSha)!.node as Extract<FakeNode, { kind: "tree" }>;
    return Object.entries(tree.children).flatMap(([name, child]) => {
      const sha = store(child);
      const item: Record<string, unknown> = { path: prefix + name, mode: modeOf(child), type: typeOf(child), sha };
      if (child.kind === "blob") item.size = Buffer.byteLength(child.content);
      item.url = `https://api.github.test/repos/x/y/git/${child.kind === "tree" ? "trees" : "blobs"}/${sha}`;
      return recursive && child.kind === "tree" ? [item, ...items(sha, true, `${prefix}${name}/`)] : [item];
    });
  }
  function pathOfTree(repo: FakeRepo, treeSha: string): string | undefined {
    for (const root of Object.values(repo.refs)) {
      const walk = (children: Record<string, FakeNode>, prefix: string): string | undefined => {
        if (store({ kind: "tree", children }) === treeSha) return prefix;
        for (const [name, child] of Object.entries(children)) {
          if (child.kind !== "tree") continue;
          const found = walk(child.children, prefix ? `${prefix}/${name}` : name);
          if (found !== undefined) return found;
        }
        return undefined;
      };
      const found = walk(root, "");
      if (found !== undefined) return found;
    }
    return undefined;
  }

  function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    res.writeHead(status, {
      "content-type": "application/json; charset=utf-8",
      "x-github-media-type": "github.v3; format=json",
      ...headers,
    });
    res.end(JSON.stringify(body));
  }
  function notFound(res: ServerResponse): void {
    send(res, 404, { message: "Not Found", documentation_url: "https://docs.github.com/rest", status: "404" });
  }

  /** GitHub's tarball of a commit: every blob under `<owner>-<repo>-<short sha>/`, symlinks as links. */
  async function tarball(full: string, ref: string): Promise<Buffer | null> {
    const commit = commits.get(`${full}@${ref}`)
      ?? [...commits.entries()].find(([key, c]) => key.startsWith(`${full}@`) && c.sha === ref)?.[1];
    if (!commit) return null;
    const tar = pack();
    const top = `${full.replace("/", "-")}-${commit.sha.slice(0, 7)}`;
    tar.entry({ name: `${top}/`, type: "directory" });
    const walk = (treeSha: string, prefix: string) => {
      const tree = objects.get(treeSha)!.node as Extract<FakeNode, { kind: "tree" }>;
      for (const [name, child] of Object.entries(tree.children)) {
        const path = `${top}/${prefix}${name}`;
        if (child.kind === "tree") {
          tar.entry({ name: `${path}/`, type: "directory" });
          walk(store(child), `${prefix}${name}/`);
        } else if (child.kind === "blob" && child.mode === "120000") {
          tar.entry({ name: path, type: "symlink", linkname: child.content });
        } else if (child.kind === "blob") {
          tar.entry({ name: path, mode: child.mode === "100755" ? 0o755 : 0o644 }, child.content);
        }
      }
    };
    walk(commit.tree, "");
    tar.finalize();
    const chunks: Buffer[] = [];
    for await (const chunk of tar) chunks.push(chunk as Buffer);
    return gzipSync(Buffer.concat(chunks));
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://fake");
    requests.push({ path: url.pathname + url.search, headers: req.headers });
    const codeload = /^\/codeload\/([^/]+)\/legacy\.tar\.gz\/(.+)$/.exec(url.pathname);
    if (codeload) {
      void tarball(decodeURIComponent(codeload[1]), decodeURIComponent(codeload[2])).then((bytes) => {
        if (!bytes) return notFound(res);
        res.writeHead(200, { "content-type": "application/x-gzip", "content-length": String(bytes.length) });
        res.end(bytes);
      });
      return;
    }
    if (!url.pathname.startsWith(`${PREFIX}/repos/`)) return notFound(res);
    const [owner, name, ...rest] = url.pathname.slice(`${PREFIX}/repos/`.length).split("/").map(decodeURIComponent);
    const full = `${owner}/${name}`;
    const repo = repos[full];
    if (!repo) return notFound(res);
    const reset = String(Math.floor(Date.now() / 1000) + 120);
    if (repo.failure === "rate-limit") {
      return send(res, 403, {
        message: `API rate limit exceeded for user ID 1.`,
        documentation_url: "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
      }, {
        "x-ratelimit-limit": "5000",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-used": "5000",
        "x-ratelimit-reset": reset,
        "x-ratelimit-resource": "core",
      });
    }
    if (repo.failure === "secondary-rate-limit") {
      return send(res, 429, { message: "You have exceeded a secondary rate limit." }, { "retry-after": "30" });
    }
    if (repo.failure === "server-error") return send(res, 500, { message: "Server Error" });
    if (rest.length === 0) {
      return send(res, 200, {
        id: 1,
        name,
        full_name: full,
        private: false,
        default_branch: repo.defaultBranch,
        owner: { login: owner },
      });
    }
    if (rest[0] === "commits" && rest.length >= 2) {
      const ref = rest.slice(1).join("/");
      if (Object.keys(repo.refs).length === 0) {
        return send(res, 409, { message: "Git Repository is empty.", status: "409" });
      }
      const commit = commits.get(`${full}@${ref}`);
      if (!commit) return send(res, 422, { message: `No commit found for SHA: ${ref}`, status: "422" });
      return send(res, 200, {
        sha: commit.sha,
        node_id: "C_x",
        commit: {
          message: ref,
          tree: { sha: commit.tree, url: `https://api.github.test/repos/${full}/git/trees/${commit.tree}` },
        },
        parents: [],
      });
    }
    if (rest[0] === "tarball" && rest.length >= 2) {
      const ref = rest.slice(1).join("/");
      res.writeHead(302, {
        location: `/codeload/${encodeURIComponent(full)}/legacy.tar.gz/${encodeURIComponent(ref)}`,
      });
      return res.end();
    }
    if (rest[0] === "git" && rest[1] === "trees" && rest.length === 3) {
      const stored = objects.get(rest[2]);
      if (!stored || stored.node.kind !== "tree") return notFound(res);
      const recursive = url.searchParams.has("recursive");
      const path = pathOfTree(repo, rest[2]);
      const truncated = recursive && path !== undefined && (repo.truncate ?? []).includes(path);
      const all = items(rest[2], recursive);
      return send(res, 200, {
        sha: rest[2],
        url: `https://api.github.test/repos/${full}/git/trees/${rest[2]}`,
        tree: truncated ? all.slice(0, 2) : all,
        truncated,
      });
    }
    notFound(res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;

  function expectedEntries(repo: string, ref: string) {
    const tree = commits.get(`${repo}@${ref}`)!.tree;
    return items(tree, true)
      .map(({ path, mode, sha, size }) => {
        const type = mode === "040000"
          ? "directory"
          : mode === "160000"
          ? "submodule"
          : mode === "120000"
          ? "symlink"
          : "file";
        return {
          path: path as string,
          type,
          mode: mode as string,
          sha: sha as string,
          ...(size === undefined ? {} : { size: size as number }),
        };
      })
      .sort((a, b) => (a.path < b.path ? -1 : 1));
  }

  return {
    apiUrl: `http://127.0.0.1:${port}${PREFIX}`,
    requests,
    commitOf: (repo, ref) => commits.get(`${repo}@${ref}`)!.sha,
    treeOf: (repo, ref) => commits.get(`${repo}@${ref}`)!.tree,
    expectedEntries,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
