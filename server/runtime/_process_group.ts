/**
 * Replicas lead their own process group (and session): a signal sent to the server's group — Ctrl-C in a
 * terminal, a container init forwarding SIGTERM to its child's group — never reaches them, so they keep
 * serving the calls the server drains and stop only when the server stops them. Stopping one signals its
 * whole group, so the processes a custom runtime starts itself stop with it.
 */
import type { ChildProcess } from "node:child_process";

/**
 * `spawn` option that starts the child in a new session (`setsid`), leading its own process group.
 * The child is not `unref`ed: the server still waits for it and sees it exit.
 */
export const OWN_PROCESS_GROUP = { detached: process.platform !== "win32" } as const;

/** Sends `signal` to every process in the replica's group; a no-op once the group is gone. */
export function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  if (!OWN_PROCESS_GROUP.detached) {
    child.kill(signal);
    return;
  }
  try {
    process.kill(-child.pid, signal);
  } catch {
    // ESRCH: every process of the group has exited.
  }
}
