import type { OpenApiDocument } from "./compile_spec.ts";

/** `{allOf: [x]}` (how TypeSpec wraps a described `$ref`) is `x`: a one-schema `allOf` says nothing more. */
function unwrapAllOf(schema: Record<string, unknown>): Record<string, unknown> {
  const { allOf, ...rest } = schema;
  if (!Array.isArray(allOf) || allOf.length !== 1 || Object.keys(rest).length > 0) return schema;
  return allOf[0] as Record<string, unknown>;
}

/**
 * Adds OpenAPI 3.1 `webhooks` for the delivery models the spec marks with `x-runplane-webhook` (the body)
 * and `x-runplane-webhook-headers` (its headers, by lowercase name). The TypeSpec emitter has no webhook
 * support, so the spec names the models and this step only places them: the headers model becomes the
 * webhook's header parameters and leaves the components (no schema refers to it).
 */
export function addWebhooks(document: OpenApiDocument): OpenApiDocument {
  const schemas = document.components.schemas;
  const webhooks: Record<string, unknown> = {};
  for (const [bodyName, body] of Object.entries(schemas)) {
    const hook = body["x-runplane-webhook"];
    if (typeof hook !== "string") continue;
    const headerEntry = Object.entries(schemas).find(([, s]) => s["x-runplane-webhook-headers"] === hook);
    if (headerEntry) delete schemas[headerEntry[0]];
    const headerSchema = headerEntry?.[1] as
      | { properties?: Record<string, Record<string, unknown>>; required?: string[] }
      | undefined;
    const parameters = Object.entries(headerSchema?.properties ?? {})
      .filter(([name]) => name !== "content-type")
      .map(([name, schema]) => {
        const { description, ...rest } = schema;
        return {
          name,
          in: "header",
          required: headerSchema?.required?.includes(name) ?? false,
          ...(description ? { description } : {}),
          schema: unwrapAllOf(rest),
        };
      });
    webhooks[hook] = {
      post: {
        operationId: `${hook}Webhook`,
        summary: `Delivered to a call's webhookEndpoint after the run ends`,
        description: String(body.description ?? ""),
        security: [],
        parameters,
        requestBody: {
          required: true,
          content: { "application/json": { schema: { $ref: `#/components/schemas/${bodyName}` } } },
        },
        responses: {
          "200": { description: "Any 2xx marks the delivery delivered." },
          "404": { description: "Retried, as a network error or 3xx is." },
          "500": { description: "Any other 4xx or a 5xx is a permanent failure: never retried." },
        },
      },
    };
  }
  return Object.keys(webhooks).length ? { ...document, webhooks } : document;
}
