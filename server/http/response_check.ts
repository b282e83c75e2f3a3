/**
 * Checks a response against the contract: its status is declared for the operation, its content type
 * is declared for that status, its headers and (JSON) body validate. Used in development and tests so
 * that a handler drifting from the spec fails loudly.
 */
import type { RouteSpec } from "../../generated/routes.ts";
import { validator } from "./validators.ts";

/** A response as written, with lowercase header names. */
export interface ResponseSnapshot {
  status: number;
  headers: Record<string, string | string[] | number | undefined>;
  /** The media type without parameters, or undefined when there is no body. */
  contentType: string | undefined;
  /** The JSON value for JSON media types, the text for text ones; undefined for streams. */
  body: unknown;
}

/**
 * Returns what is wrong with the response, or an empty list.
 */
export function checkResponse(route: RouteSpec, response: ResponseSnapshot): string[] {
  const responses = route.validators.responses as Record<
    string,
    { headers: string; content: Record<string, string | null> }
  >;
  // A range (`2XX`: a custom runtime's status, passed through) covers the statuses not declared one by one.
  const declared = responses[String(response.status)] ?? responses[`${String(response.status)[0]}XX`];
  if (!declared) {
    return [`status ${response.status} is not declared for ${route.operationId}`];
  }
  const problems: string[] = [];
  const headers: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(response.headers)) {
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(", ") : String(value);
  }
  // Header schemas type numeric headers (Retry-After) as integers; compare their decoded form.
  for (const [name, value] of Object.entries(headers)) {
    if (typeof value === "string" && /^\d+$/.test(value) && name === "retry-after") headers[name] = Number(value);
  }
  const headersValid = validator(declared.headers);
  if (!headersValid(headers)) {
    for (const e of headersValid.errors ?? []) {
      problems.push(`header ${e.instancePath || ""} ${e.message} ${JSON.stringify(e.params)}`);
    }
  }
  const contentTypes = Object.keys(declared.content);
  // A HEAD answer never has a body: its Content-Type is the one a GET would answer with.
  if (route.method === "HEAD") return problems;
  // Any media type, or none (a custom runtime's answer, passed through).
  if (contentTypes.includes("*/*")) return problems;
  if (contentTypes.length === 0) {
    if (response.contentType !== undefined) problems.push(`status ${response.status} must have no body`);
    return problems;
  }
  if (!response.contentType || !contentTypes.includes(response.contentType)) {
    problems.push(`content type ${response.contentType} is not one of ${contentTypes.join(", ")}`);
    return problems;
  }
  const bodyValidator = declared.content[response.contentType];
  if (bodyValidator && response.body !== undefined) {
    const bodyValid = validator(bodyValidator);
    if (!bodyValid(response.body)) {
      for (const e of bodyValid.errors ?? []) {
        problems.push(`body${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`);
      }
    }
  }
  return problems;
}
