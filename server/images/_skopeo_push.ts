/**
 * Pushing a root file system the host built (a system layer) to the cluster's registry, so that other hosts
 * pull it instead of building it again: the tree packed by `tar` as one layer of a new OCI image (umoci, in
 * a layout of its own under the store's temporary folder), then copied by skopeo.
 */
import { join } from "node:path";
import { makeOwnedTemp, removeOwnedTemp } from "./_owned_temp.ts";
import { runTool } from "./_run_tool.ts";
import type { ImageReference } from "./image_reference.ts";

/** What one push needs. */
export interface SkopeoPushOptions {
  skopeo: string;
  umoci: string;
  tar: string;
  /** The store's folder for temporary files. */
  tmp: string;
  policy: string;
  /** The destination is reached over HTTP or without certificate checks. */
  insecure: boolean;
  authFile: string | null;
  timeoutMs: number;
  env: Record<string, string>;
}

/**
 * Packs `root` as a one-layer image and pushes it as `reference`. `root` is a tree no process writes any
 * more (a finished layer): `tar` stores links as links, never what they name, and numeric owners.
 */
export async function pushRoot(
  root: string,
  options: SkopeoPushOptions & { reference: ImageReference },
): Promise<void> {
  const scratch = await makeOwnedTemp(options.tmp, "push");
  const tool = (timeoutMs: number) => ({ timeoutMs, env: options.env });
  try {
    const tarball = join(scratch, "root.tar");
    const layout = join(scratch, "oci");
    const image = `${layout}:layer`;
    await runTool(options.tar, ["--numeric-owner", "-C", root, "-cf", tarball, "."], {
      ...tool(options.timeoutMs),
      subcommand: "create",
    });
    await runTool(options.umoci, ["init", "--layout", layout], { ...tool(60_000), subcommand: "init" });
    await runTool(options.umoci, ["new", "--image", image], { ...tool(60_000), subcommand: "new" });
    await runTool(options.umoci, ["raw", "add-layer", "--image", image, tarball], {
      ...tool(options.timeoutMs),
      subcommand: "raw add-layer",
    });
    const { reference } = options;
    await runTool(options.skopeo, [
      "--policy",
      options.policy,
      "--tmpdir",
      options.tmp,
      "copy",
      "--retry-times",
      "2",
      `--dest-tls-verify=${!options.insecure}`,
      ...(options.authFile ? ["--dest-authfile", options.authFile] : ["--dest-no-creds"]),
      `oci:${image}`,
      `docker://${reference.registry}/${reference.repository}:${reference.tag}`,
    ], { ...tool(options.timeoutMs), subcommand: "copy" });
  } finally {
    await removeOwnedTemp(options.tmp, scratch);
  }
}
