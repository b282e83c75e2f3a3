/**
 * The contract as a third party's generator reads it: hey-api's `@hey-api/openapi-ts` (pinned in
 * package.json) generates a client from generated/openapi.json into a temporary folder, and `tsc
 * --noEmit` type-checks a probe that asserts what it typed: each event stream's items as one event (not
 * an array of them), and createDeployment's bundle as binary (docs/rest-api-and-cli.md, "Generating a
 * client from the contract").
 *
 * hey-api keeps one media type per request body and per response: the JSON one when there is one, else
 * the first listed. So it types runFunction's, getRunLogs' and getAppLogs' 200 as their JSON answers and
 * createDeployment's body as JSON (pinned below, as the docs say). What it would type had it kept the
 * other media type is checked on a second document: the same contract with only the event streams and
 * the bundle left in those places.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ROOT } from "../../scripts/generate.ts";

type Media = Record<string, { schema?: { format?: string } }>;
type Operation = { requestBody?: { content: Media }; responses: Record<string, { content?: Media }> };
type Document = { paths: Record<string, Record<string, Operation>> };

const EVENT_STREAM = "text/event-stream";

/** `document` with only the event stream left in each response that has one, and only the binary body. */
function streamsAndBundles(document: Document): Document {
  const copy = structuredClone(document);
  for (const item of Object.values(copy.paths)) {
    for (const operation of Object.values(item)) {
      for (const response of Object.values(operation.responses ?? {})) {
        const stream = response.content?.[EVENT_STREAM];
        if (stream) response.content = { [EVENT_STREAM]: stream };
      }
      const body = operation.requestBody;
      const binary = Object.entries(body?.content ?? {}).find(([, media]) => media.schema?.format === "binary");
      if (body && binary) body.content = Object.fromEntries([binary]);
    }
  }
  return copy;
}

/**
 * Runs `node ...args` to its end, never blocking this process's event loop (a shard runs other files'
 * servers and browsers in this process: a synchronous child of ~10 s starved them), with its exit code.
 */
async function runNode(args: string[], options: { cwd?: string } = {}): Promise<{ status: number; output: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, args, { ...options, encoding: "utf8" });
    return { status: 0, output: `${stdout}${stderr}` };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    // A child that never started (ENOENT) has a string code and no output: its message says why.
    const output = `${failed.stdout ?? ""}${failed.stderr ?? ""}` || String(error);
    return { status: typeof failed.code === "number" ? failed.code : 1, output };
  }
}

/** Runs hey-api's command line (its defaults: types, SDK, fetch client) on `input` into `output`. */
async function heyApi(input: string, output: string): Promise<void> {
  const cli = join(ROOT, "node_modules", "@hey-api", "openapi-ts", "bin", "run.js");
  // Its own folder as the working directory: it looks for a config file there.
  const result = await runNode([cli, "-i", input, "-o", output, "--silent", "--no-log-file"], {
    cwd: join(output, ".."),
  });
  assert.equal(result.status, 0, `openapi-ts failed:\n${result.output}`);
}

const PROBE = `
import type * as Doc from "./as_is/types.gen";
import type * as DocSdk from "./as_is/sdk.gen";
import type * as Alt from "./alternatives/types.gen";
import type * as AltSdk from "./alternatives/sdk.gen";

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false;
function expect<T extends true>(): T | void {}
/** The type of the items the SDK function's \`stream\` yields. */
type Item<F extends (...args: never[]) => unknown> = Awaited<ReturnType<F>> extends
  { stream: AsyncGenerator<infer T, unknown, unknown> } ? T : never;

// watchRuns answers only a stream: its items are one event each.
expect<Equal<Doc.WatchRunsResponses[200], Doc.RunChangeEvent | Doc.RunResyncEvent>>();
expect<Equal<Item<typeof DocSdk.watchRuns>, Doc.RunChangeEvent | Doc.RunResyncEvent>>();

// hey-api keeps the JSON media type of a body or response that has several (else the first listed).
expect<Equal<Doc.RunFunctionResponses[200], Doc.RunResult>>();
expect<Equal<Doc.GetRunLogsResponses[200], Doc.RunLog>>();
expect<Equal<Doc.GetAppLogsResponses[200], Doc.AppLogPage>>();
expect<Equal<Doc.CreateDeploymentData["body"], Doc.DeploymentSourceRequest>>();
expect<Equal<Doc.GetDeploymentLogsResponses[200], string>>();

// Had it kept the other media type: every stream's items are one event, the bundle is a Blob.
expect<Equal<Alt.RunFunctionResponses[200], Alt.RunItemEvent | Alt.RunErrorEvent>>();
// (hey-api's stream yields any 2xx answer's type: 202 is the run accepted to run later)
expect<Equal<Item<typeof AltSdk.runFunction>, Alt.RunItemEvent | Alt.RunErrorEvent | Alt.RunAccepted>>();
expect<Equal<Item<typeof AltSdk.getRunLogs>, Alt.RunLogLineEvent | Alt.RunLogEndEvent>>();
expect<Equal<Item<typeof AltSdk.getAppLogs>, Alt.AppLogLineEvent>>();
expect<Equal<Item<typeof AltSdk.getDeploymentLogs>, Alt.BuildLogLineEvent | Alt.BuildLogEndEvent>>();
expect<Equal<Item<typeof AltSdk.watchRuns>, Alt.RunChangeEvent | Alt.RunResyncEvent>>();
const bundle: Alt.CreateDeploymentData["body"] = new Blob([new Uint8Array([0x1f, 0x8b])]);
void bundle;
`;

const TSCONFIG = {
  compilerOptions: {
    strict: true,
    noEmit: true,
    target: "es2022",
    module: "esnext",
    moduleResolution: "bundler",
    lib: ["es2022", "dom", "dom.iterable"],
    types: [],
    skipLibCheck: true,
  },
  files: ["probe.ts"],
};

describe("a generic generator (hey-api's openapi-ts) on generated/openapi.json", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-hey-api-"));
    const document = JSON.parse(await readFile(join(ROOT, "generated", "openapi.json"), "utf8")) as Document;
    await writeFile(join(dir, "alternatives.json"), JSON.stringify(streamsAndBundles(document)));
    await heyApi(join(ROOT, "generated", "openapi.json"), join(dir, "as_is"));
    await heyApi(join(dir, "alternatives.json"), join(dir, "alternatives"));
    await writeFile(join(dir, "probe.ts"), PROBE);
    await writeFile(join(dir, "tsconfig.json"), JSON.stringify(TSCONFIG));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("types each event stream's items as one event, and the bundle as a Blob (tsc --noEmit)", async () => {
    const tsc = join(ROOT, "node_modules", "typescript", "bin", "tsc");
    const result = await runNode([tsc, "-p", dir, "--pretty", "false"]);
    // Each error with the probe's line it is about.
    const lines = PROBE.split("\n");
    const said = result.output.replace(/probe\.ts\((\d+),\d+\)/g, (at, line: string) => {
      return `${at} [${lines[Number(line) - 1].trim()}]`;
    });
    assert.equal(result.status, 0, `the probe does not type-check:\n${said}`);
  });
});
