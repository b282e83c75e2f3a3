import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** An OpenAPI 3.1 document as plain JSON. */
export type OpenApiDocument = Record<string, unknown> & {
  paths: Record<string, Record<string, OpenApiOperation>>;
  components: { schemas: Record<string, JsonSchema>; securitySchemes?: Record<string, unknown> };
  security?: Array<Record<string, string[]>>;
};

/** A JSON Schema object (2020-12 dialect, as OpenAPI 3.1 uses it). */
export type JsonSchema = Record<string, unknown>;

/** An OpenAPI operation object, with the members the generator reads. */
export interface OpenApiOperation {
  operationId: string;
  parameters?: OpenApiParameter[];
  requestBody?: { required?: boolean; content: Record<string, { schema: JsonSchema }> };
  responses: Record<string, OpenApiResponse>;
  security?: Array<Record<string, string[]>>;
  [extension: `x-${string}`]: unknown;
}

/** An OpenAPI parameter object. */
export interface OpenApiParameter {
  name: string;
  in: "path" | "query" | "header" | "cookie";
  required?: boolean;
  schema: JsonSchema;
}

/** An OpenAPI response object. */
export interface OpenApiResponse {
  description?: string;
  headers?: Record<string, { required?: boolean; schema: JsonSchema }>;
  /** Per media type: its schema, and extensions (`x-runplane-sequence`: see event_streams.ts). */
  content?: Record<string, { schema?: JsonSchema; [extension: `x-${string}`]: unknown }>;
}

/**
 * Compiles the TypeSpec contract in `specDir` with its `tspconfig.yaml` and returns the OpenAPI 3.1
 * document. Throws with the compiler's diagnostics when the spec does not compile cleanly.
 */
export async function compileSpec(specDir: string): Promise<OpenApiDocument> {
  const require = createRequire(import.meta.url);
  const entry = require.resolve("@typespec/compiler");
  const tsp = join(
    entry.slice(0, entry.lastIndexOf("node_modules")),
    "node_modules",
    "@typespec",
    "compiler",
    "cmd",
    "tsp.js",
  );
  const outDir = await mkdtemp(join(tmpdir(), "runplane-tsp-"));
  try {
    await run(process.execPath, [
      tsp,
      "compile",
      specDir,
      "--option",
      `@typespec/openapi3.emitter-output-dir=${outDir}`,
    ]).catch((error: { stdout?: string; stderr?: string }) => {
      throw new Error(`TypeSpec compilation failed:\n${error.stdout ?? ""}${error.stderr ?? ""}`);
    });
    return JSON.parse(await readFile(join(outDir, "openapi.json"), "utf8")) as OpenApiDocument;
  } finally {
    await rm(outDir, { recursive: true, force: true });
  }
}
