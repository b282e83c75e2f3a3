/**
 * The Node flags the server runs with: `npm start`, the `runplane` executable, the tests' and the
 * benchmarks' server processes, and the production commands docs/operating.md gives.
 *
 * `--max-semi-space-size=16` keeps V8's young generation at Node 20's size on every Node. Node 22 and
 * later double its semi-spaces to 32 MiB, and the server's allocation rate while it receives deploy
 * bundles fills them: three concurrent 99 MiB uploads grew its RSS by ~89 MiB on Node 24 against ~24 MiB
 * with this flag (test/deployments/bundle_uploads_test.ts), for garbage a scavenge would have freed.
 */
import { setFlagsFromString } from "node:v8";

/** The flags on the server's command line (see above). */
export const SERVER_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=16"];

/**
 * The V8 flags `serve` sets when it starts (not on the command line: Node 20's V8 refuses them there).
 *
 * `--scavenger-max-new-space-capacity-mb=4` bounds the bytes of buffers V8 lets die young before it
 * scavenges for them. A deploy bundle streams through the server as tens of thousands of short-lived
 * 16–64 KiB buffers (socket reads, file reads, gunzip output, store rows) whose memory outside the V8
 * heap is freed only by the scavenge that finds them dead. V8 forces that scavenge once the young
 * generation's buffers reach twice this capacity (doubled again without pointer compression, as in
 * Node): 32 MiB on Node 20 and 22, but 128 MiB on Node 24, whose default capacity is 32. Three
 * concurrent 99 MiB uploads then grew the server's RSS by 64–77 MiB on Node 24 (all of it the main
 * malloc arena; heaptrack found 57–59 MiB of buffers there at the peak); with 4 (a scavenge per 16 MiB
 * of buffers), by 28–31 MiB. The flag exists from V8 12.4 (Node 22); it is read at each buffer's allocation, so setting it
 * at start takes effect.
 */
export function serverV8Flags(v8Version: string): string[] {
  const [major, minor] = v8Version.split(".").map(Number);
  if (major > 12 || (major === 12 && minor >= 4)) return ["--scavenger-max-new-space-capacity-mb=4"];
  return [];
}

/** Sets `serverV8Flags` of this process's V8. */
export function applyServerV8Flags(): void {
  for (const flag of serverV8Flags(process.versions.v8)) setFlagsFromString(flag);
}
