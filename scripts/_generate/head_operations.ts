/**
 * TypeSpec writes a HEAD operation's answers with bodies as `application/json`, with their real media type
 * as a `content-type` header. A HEAD answer has no body, but its headers are those a GET's would be: this
 * step gives each such answer back its media type (a problem's `application/problem+json`) and drops the
 * header, so a HEAD's answers read as its GET's do.
 */
import type { OpenApiDocument } from "./compile_spec.ts";

/** Moves each HEAD answer's `content-type` header back to its content's media type; returns the document. */
export function restoreHeadMediaTypes(document: OpenApiDocument): OpenApiDocument {
  for (const item of Object.values(document.paths)) {
    const head = item.head;
    if (!head) continue;
    for (const response of Object.values(head.responses)) {
      const header = response.headers?.["content-type"];
      const declared = (header?.schema.enum as unknown[] | undefined)?.[0];
      const media = response.content?.["application/json"];
      if (typeof declared !== "string" || !media || Object.keys(response.content!).length !== 1) continue;
      response.content = { [declared]: media };
      delete response.headers!["content-type"];
    }
  }
  return document;
}
