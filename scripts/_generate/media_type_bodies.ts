/**
 * TypeSpec gives every content type of a request body the same schema, so a body declared as
 * `bytes | Model` for `"application/gzip" | "application/json"` reads "either" under both. This step
 * narrows such a union per media type: the JSON types keep the model, the others keep the bytes (as
 * OpenAPI 3.1 writes raw bytes: a string with `contentMediaType`, and `format: binary` for generators
 * that read 3.0's way), so the contract says what each type carries and the JSON body validator checks
 * only the model.
 */
import type { JsonSchema, OpenApiDocument } from "./compile_spec.ts";

function isBytes(schema: JsonSchema): boolean {
  return schema.type === "string" && schema.contentEncoding === "base64";
}

function isJsonMediaType(mediaType: string): boolean {
  return mediaType === "application/json" || mediaType.endsWith("+json");
}

/** Narrows each `bytes | Model` request body per media type; returns the document. */
export function narrowMediaTypeBodies(document: OpenApiDocument): OpenApiDocument {
  for (const item of Object.values(document.paths)) {
    for (const operation of Object.values(item)) {
      const content = operation.requestBody?.content;
      if (!content) continue;
      for (const [mediaType, media] of Object.entries(content)) {
        const variants = media.schema.anyOf as JsonSchema[] | undefined;
        if (!variants || variants.length !== 2 || !variants.some(isBytes)) continue;
        media.schema = isJsonMediaType(mediaType)
          ? variants.find((v) => !isBytes(v))!
          : { type: "string", format: "binary", contentMediaType: mediaType };
      }
    }
  }
  return document;
}
