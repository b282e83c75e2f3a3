import type { JsonSchema, OpenApiDocument, OpenApiOperation, OpenApiParameter } from "./compile_spec.ts";

/** The HTTP methods an OpenAPI path item can hold. */
export const HTTP_METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"] as const;

/** One operation with its path, method and the schemas its validators are compiled from. */
export interface OperationSchemas {
  operationId: string;
  method: (typeof HTTP_METHODS)[number];
  path: string;
  operation: OpenApiOperation;
  /** `{path, query, header}` objects, each keyed by the parameters' names as the spec spells them. */
  params: JsonSchema;
  /** The `application/json` request body schema, when the operation takes one. */
  body: JsonSchema | null;
  /** Per status code: its required and optional headers, and a schema per content type. */
  responses: Record<string, { headers: JsonSchema; content: Record<string, JsonSchema | null> }>;
}

const COMPONENT_PREFIX = "#/components/schemas/";

/** The `$id` under which the document's component schemas are registered with ajv. */
export const COMPONENTS_ID = "runplane-openapi";

/**
 * Rewrites `#/components/schemas/X` references so that schemas taken out of the document still resolve
 * against the components registered under `COMPONENTS_ID`.
 */
export function rebaseRefs<T>(value: T): T {
  if (Array.isArray(value)) return value.map(rebaseRefs) as T;
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(value)) {
    out[key] = key === "$ref" && typeof inner === "string" && inner.startsWith(COMPONENT_PREFIX)
      ? `${COMPONENTS_ID}#/$defs/${inner.slice(COMPONENT_PREFIX.length)}`
      : rebaseRefs(inner);
  }
  return out as T;
}

/** Follows a component `$ref` (one level at a time) to the schema it names. */
export function resolveSchema(document: OpenApiDocument, schema: JsonSchema): JsonSchema {
  let current = schema;
  for (let depth = 0; depth < 16 && typeof current.$ref === "string"; depth++) {
    const name = current.$ref.slice(COMPONENT_PREFIX.length);
    current = document.components.schemas[name] ?? {};
  }
  return current;
}

function objectOf(parameters: OpenApiParameter[]): JsonSchema {
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  for (const p of parameters) {
    properties[p.name] = rebaseRefs(p.schema);
    if (p.required) required.push(p.name);
  }
  return { type: "object", properties, ...(required.length ? { required } : {}) };
}

/** Lists every operation of the document, in path then method order, with the schemas to validate it. */
export function operationSchemas(document: OpenApiDocument): OperationSchemas[] {
  const out: OperationSchemas[] = [];
  for (const path of Object.keys(document.paths).sort()) {
    const item = document.paths[path];
    for (const method of HTTP_METHODS) {
      const operation = item[method];
      if (!operation) continue;
      const parameters = operation.parameters ?? [];
      const params: JsonSchema = {
        type: "object",
        required: ["path", "query", "header"],
        properties: {
          path: objectOf(parameters.filter((p) => p.in === "path")),
          query: objectOf(parameters.filter((p) => p.in === "query")),
          header: objectOf(parameters.filter((p) => p.in === "header")),
        },
      };
      const jsonBody = operation.requestBody?.content["application/json"]?.schema;
      const responses: OperationSchemas["responses"] = {};
      for (const status of Object.keys(operation.responses).sort()) {
        const response = operation.responses[status];
        const headerProps: Record<string, JsonSchema> = {};
        const required: string[] = [];
        for (const [name, header] of Object.entries(response.headers ?? {})) {
          headerProps[name.toLowerCase()] = rebaseRefs(header.schema);
          if (header.required) required.push(name.toLowerCase());
        }
        const content: Record<string, JsonSchema | null> = {};
        for (const contentType of Object.keys(response.content ?? {}).sort()) {
          const schema = response.content?.[contentType]?.schema;
          content[contentType] = schema ? rebaseRefs(schema) : null;
        }
        responses[status] = {
          headers: { type: "object", properties: headerProps, ...(required.length ? { required } : {}) },
          content,
        };
      }
      out.push({
        operationId: operation.operationId,
        method,
        path,
        operation,
        params,
        body: jsonBody ? rebaseRefs(jsonBody) : null,
        responses,
      });
    }
  }
  return out;
}

/** A JavaScript identifier for a content type: `application/problem+json` → `application_problem_json`. */
export function contentTypeSlug(contentType: string): string {
  return contentType.replace(/[^A-Za-z0-9]+/g, "_").replace(/^_|_$/g, "");
}
