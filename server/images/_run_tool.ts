/** Runs one image tool as argv (never through a shell), with a time limit and a plain environment. */
import { execFile } from "node:child_process";

/** Options of {@link runTool}. */
export interface RunToolOptions {
  /** Killed (SIGKILL) after this long. */
  timeoutMs: number;
  /** The tool's whole environment: nothing of the server's is passed on but what the caller puts here. */
  env: Record<string, string>;
  /** The tool's subcommand, as its errors name it (`copy`, `raw unpack`). */
  subcommand: string;
}

/** A tool that failed, timed out or could not start; the message names the tool and ends with its last output. */
export class ImageToolError extends Error {
  override name = "ImageToolError";
}

const OUTPUT_TAIL = 2000;

function tail(text: string): string {
  const trimmed = text.trim();
  return trimmed.length > OUTPUT_TAIL ? `…${trimmed.slice(-OUTPUT_TAIL)}` : trimmed;
}

/** Runs `tool` with `args` and resolves to its stdout; rejects with an {@link ImageToolError} when it fails. */
export function runTool(tool: string, args: string[], options: RunToolOptions): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      tool,
      args,
      {
        env: options.env,
        timeout: options.timeoutMs,
        killSignal: "SIGKILL",
        maxBuffer: 16 * 1024 * 1024,
        encoding: "utf8",
        shell: false,
      },
      (error, stdout, stderr) => {
        if (!error) return resolve(stdout);
        const name = tool.split("/").pop();
        const why = error.killed
          ? `was stopped after ${Math.round(options.timeoutMs / 1000)} s`
          : typeof error.code === "number"
          ? `exited with code ${error.code}`
          : `could not run (${error.message})`;
        const output = tail(`${stderr}\n${stdout}`);
        reject(new ImageToolError(`${name} ${options.subcommand} ${why}${output ? `: ${output}` : ""}`));
      },
    );
  });
}
