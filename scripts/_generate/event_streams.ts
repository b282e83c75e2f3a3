/**
 * OpenAPI 3.1 has no `itemSchema` (3.2's way to type the items of a sequential media type), so a
 * `text/event-stream` body's `schema` is written as the schema of ONE event, and the media type object
 * says `x-runplane-sequence: true`: the body is a sequence of such events (what 3.2 writes as `itemSchema`).
 * Each event is an object of the event-stream fields it carries. Generic generators then type a stream's
 * items as one event, not the stream as an array (test/contract/generic_generator_test.ts), and the
 * stream's validator checks one event. The spec declares the stream's body as an array of its events
 * (TypeSpec has no item schema either); this step unwraps it.
 *
 * The spec declares each event model with its payload as the value it decodes to (`data: RunChange`); on
 * the wire `data` is text, so this step writes such a `data` as a string whose `contentMediaType` is
 * `application/json` and whose `contentSchema` is the payload's schema. Generated clients then type the
 * payloads as the components they name.
 */
import type { JsonSchema, OpenApiDocument } from "./compile_spec.ts";
import { HTTP_METHODS } from "./operation_schemas.ts";

const EVENT_STREAM = "text/event-stream";

/** The media type object's extension saying that its `schema` is that of each item of a sequence. */
export const SEQUENCE_EXTENSION = "x-runplane-sequence";
const COMPONENT_PREFIX = "#/components/schemas/";

/** `{allOf: [x], description}` (how TypeSpec describes a `$ref`) → `x` and the description. */
function withoutDescription(schema: JsonSchema): { payload: JsonSchema; description?: unknown } {
  const { description, ...rest } = schema;
  const { allOf, ...others } = rest;
  const payload = Array.isArray(allOf) && allOf.length === 1 && Object.keys(others).length === 0
    ? (allOf[0] as JsonSchema)
    : rest;
  return { payload, description };
}

/** Whether `schema` is text as it is (a plain string): such a `data` is not JSON. */
function isText(schema: JsonSchema): boolean {
  return schema.type === "string" && schema.$ref === undefined && schema.contentMediaType === undefined;
}

/** The schema of one event of an event-stream body declared as an array of its events. */
function eventSchema(body: JsonSchema | undefined): JsonSchema {
  if (!body || body.type !== "array" || typeof body.items !== "object" || body.items === null) {
    throw new Error(`A ${EVENT_STREAM} body must be declared as an array of its events (see event_streams.ts)`);
  }
  return body.items as JsonSchema;
}

/** The component names of the events `items` (one event's schema) may be. */
function eventComponents(items: JsonSchema): string[] {
  const variants = (items.anyOf ?? items.oneOf ?? [items]) as JsonSchema[];
  return variants.map((variant) => {
    if (typeof variant.$ref !== "string" || !variant.$ref.startsWith(COMPONENT_PREFIX)) {
      throw new Error(`A ${EVENT_STREAM} event must be a named model, not ${JSON.stringify(variant)}`);
    }
    return variant.$ref.slice(COMPONENT_PREFIX.length);
  });
}

/**
 * Writes each event-stream body's schema as one event's, marked as a sequence, and each event model's
 * non-text `data` as JSON text with its schema; returns the document.
 */
export function describeEventStreams(document: OpenApiDocument): OpenApiDocument {
  const events = new Set<string>();
  for (const item of Object.values(document.paths)) {
    for (const method of HTTP_METHODS) {
      for (const response of Object.values(item[method]?.responses ?? {})) {
        const media = response.content?.[EVENT_STREAM];
        if (!media) continue;
        const event = eventSchema(media.schema);
        response.content![EVENT_STREAM] = { schema: event, [SEQUENCE_EXTENSION]: true };
        for (const name of eventComponents(event)) events.add(name);
      }
    }
  }
  for (const name of [...events].sort()) {
    const event = document.components.schemas[name];
    const properties = event?.properties as Record<string, JsonSchema> | undefined;
    const data = properties?.data;
    if (!data) throw new Error(`The event model ${name} has no \`data\``);
    if (isText(data)) continue;
    const { payload, description } = withoutDescription(data);
    properties.data = {
      type: "string",
      contentMediaType: "application/json",
      contentSchema: payload,
      ...(description === undefined ? {} : { description }),
    };
  }
  return document;
}
