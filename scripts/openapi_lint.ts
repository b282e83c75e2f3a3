/**
 * The linters `npm run check` runs on the OpenAPI document: Redocly with its `recommended` rules
 * (`redocly.yaml`) and Spectral with `spectral:oas` (`.spectral.yaml`). Each reports every problem,
 * warnings included, as one line; the check passes only when both report none. Both are read from their
 * JSON reports, since neither exits non-zero on a warning by default.
 */
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { ROOT } from "./generate.ts";

const ENV = { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" };

const SEVERITIES = ["error", "warn", "info", "hint"];

/** Runs `script` (a linter's bin) with `args` from the root and parses its standard output as JSON. */
function jsonReport<T>(name: string, script: string, args: string[]): { report?: T; failure?: string } {
  const result = spawnSync(process.execPath, [script, ...args], {
    cwd: ROOT,
    env: ENV,
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  try {
    return { report: JSON.parse(result.stdout) as T };
  } catch {
    const said = `${result.stderr}${result.stdout}`.trim().split("\n").slice(-3).join(" ");
    return { failure: `${name} did not report (exit ${result.status}): ${said}` };
  }
}

/** Every problem Redocly's `recommended` rules find in `document` (a path from the root). */
export function redoclyProblems(document: string): string[] {
  type Report = {
    problems: Array<{ ruleId: string; severity: string; message: string; location?: Array<{ pointer?: string }> }>;
  };
  const cli = join(ROOT, "node_modules", "@redocly", "cli", "bin", "cli.js");
  const args = ["lint", document, "--config", "redocly.yaml", "--format=json", "--max-problems=1000"];
  const { report, failure } = jsonReport<Report>("redocly", cli, args);
  if (!report) return [failure!];
  return report.problems.map((p) => `${p.severity} ${p.ruleId} at ${p.location?.[0]?.pointer ?? "#"}: ${p.message}`);
}

/** Every problem Spectral's `spectral:oas` rules find in `document` (a path from the root). */
export function spectralProblems(document: string): string[] {
  type Report = Array<{ code: string; severity: number; message: string; path: string[] }>;
  const cli = join(ROOT, "node_modules", "@stoplight", "spectral-cli", "dist", "index.js");
  const args = ["lint", document, "--ruleset", ".spectral.yaml", "--format", "json", "--quiet"];
  const { report, failure } = jsonReport<Report>("spectral", cli, args);
  if (!report) return [failure!];
  return report.map((p) => `${SEVERITIES[p.severity] ?? p.severity} ${p.code} at #/${p.path.join("/")}: ${p.message}`);
}
