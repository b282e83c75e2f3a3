/** Deploys bundles over the REST API, as `runplane deploy` does, and follows their build logs. */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packBundle } from "../../client/bundle.ts";
import { checkedFetch } from "./contract.ts";
import { TEST_PROJECT, type TestServer } from "./server.ts";

/** A deployment as the API reports it. */
export type Deployment = {
  deployment_id: string;
  status: string;
  active: boolean;
  digest: string;
  error: string | null;
};

/**
 * Writes an app folder with `files` (paths may have folders) and returns it packed; a file whose text starts
 * with `#!` is executable.
 */
export async function bundleOf(files: Record<string, string>): Promise<Uint8Array> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-bundle-"));
  try {
    for (const [name, text] of Object.entries(files)) {
      await mkdir(join(dir, name, ".."), { recursive: true });
      await writeFile(join(dir, name), text, { mode: text.startsWith("#!") ? 0o755 : 0o644 });
    }
    return (await packBundle(dir)).bytes;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Deploys `bundle` as `appId` of `p-test` (or of `project`) and follows its build log to the end. */
export async function deployBundle(
  t: Pick<TestServer, "url">,
  appId: string,
  bundle: Uint8Array,
  token: string,
  options: { project?: string } = {},
): Promise<Deployment & { lines: string[] }> {
  const base = `${t.url}/v3/projects/${options.project ?? TEST_PROJECT}/apps/${appId}/deployments`;
  const headers = { Authorization: `Bearer ${token}` };
  const response = await checkedFetch(base, {
    method: "POST",
    headers: { ...headers, "Content-Type": "application/gzip" },
    body: new Uint8Array(bundle),
  });
  assert.equal(response.status, 202, await response.clone().text());
  const accepted = (await response.json()) as Deployment;
  const log = await checkedFetch(`${base}/${accepted.deployment_id}/logs`, {
    headers: { ...headers, Accept: "text/event-stream" },
  });
  const text = await log.text();
  const lines: string[] = [];
  let end: Deployment | undefined;
  for (const block of text.split("\n\n")) {
    const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
    if (block.includes("event: end")) end = JSON.parse(data) as Deployment;
    else if (block.startsWith("data: ")) lines.push(data);
  }
  assert.ok(end, `the build log ended with the deployment: ${text}`);
  return { ...end, lines };
}
