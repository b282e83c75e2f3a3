/**
 * Makes a child process die with the server, even when the server is killed with SIGKILL and has no
 * chance to stop it: a tiny Python launcher asks Linux to send the child SIGKILL when its parent exits
 * (`prctl(PR_SET_PDEATHSIG)`, which survives `exec`), then execs the real command in the same process.
 * The Python worker harness needs none of this: it exits when its protocol pipe closes.
 * The parent death signal follows the parent (the thread that spawned the child), not the process group,
 * so it still holds for replicas started in their own group (see `_process_group.ts`).
 */

const LAUNCHER = [
  "import ctypes, os, signal, sys",
  "libc = ctypes.CDLL(None, use_errno=True)",
  "if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0: sys.exit('runplane: prctl(PR_SET_PDEATHSIG) failed')",
  // The parent may have died before prctl took effect.
  "if os.getppid() != int(os.environ['RUNPLANE_PARENT_PID']): sys.exit(1)",
  "os.execvp(sys.argv[1], sys.argv[1:])",
].join("\n");

/** A command that runs `command` with `args`, killed when this process exits; pass `env` to the spawn. */
export function orphanGuarded(
  command: string,
  args: string[],
): { command: string; args: string[]; env: Record<string, string> } {
  if (process.platform !== "linux") return { command, args, env: {} };
  return {
    command: "python3",
    args: ["-c", LAUNCHER, command, ...args],
    env: { RUNPLANE_PARENT_PID: String(process.pid) },
  };
}
