/**
 * A process's network gate (`SandboxSpawnOptions.networkGate`): a pipe it reads once before it needs its
 * network, on which the sandbox says `x` once the network is in. Its one byte is written and the pipe
 * closed; a process that exited first leaves a write that fails, which must not crash the server.
 */
import type { ChildProcess } from "node:child_process";
import type { Writable } from "node:stream";

/** Tells `child` that its network is in: `x` on its gate (the stdio index `gate`), then the end. */
export function openNetworkGate(child: ChildProcess, gate: number): void {
  const pipe = child.stdio[gate] as Writable | null;
  pipe?.on("error", () => undefined);
  pipe?.end("x");
}
