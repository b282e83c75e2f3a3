/**
 * Decodes a request's raw parameters by the route table (query and path strings to the types the
 * contract declares) and validates them and the body with the generated validators. Free of Koa.
 */
import type { RouteSpec } from "../../generated/routes.ts";
import { type FieldError, ProblemError } from "../problems/mod.ts";
import { SpooledBody } from "./spool_body.ts";
import { StreamedBody } from "./streamed_body.ts";
import { fieldErrors, validator } from "./validators.ts";

/** A request's raw parts, as the HTTP layer read them. */
export interface RawRequest {
  params: Record<string, string>;
  query: Record<string, string | string[] | undefined>;
  /** Header lookup by name, case-insensitive: every value when the header was sent more than once. */
  header(name: string): string | string[] | undefined;
  /** The parsed JSON body, a body of another media type spooled to a file, or undefined when the request had none. */
  body: unknown;
}

/** Decoded, validated parameters and body. */
export interface DecodedRequest {
  path: Record<string, unknown>;
  query: Record<string, unknown>;
  header: Record<string, unknown>;
  body: unknown;
}

function coerce(type: string, value: string | string[]): unknown {
  if (Array.isArray(value)) return value;
  if (type === "boolean") return value === "true" ? true : value === "false" ? false : value;
  if (type === "integer" && /^-?\d{1,15}$/.test(value)) return Number(value);
  if (type === "number" && value.trim() !== "" && Number.isFinite(Number(value))) return Number(value);
  return value;
}

/** Decodes and validates; throws a 400 `validation` problem listing every failing field. */
export function decodeRequest(route: RouteSpec, raw: RawRequest): DecodedRequest {
  const decoded: DecodedRequest = { path: {}, query: {}, header: {}, body: raw.body };
  const repeated: FieldError[] = [];
  for (const param of route.params) {
    const value = param.in === "path"
      ? raw.params[param.name]
      : param.in === "query"
      ? raw.query[param.name]
      : raw.header(param.name);
    if (value === undefined) continue;
    if (param.in === "header" && Array.isArray(value)) {
      // A header sent twice is not one value joined with ", ": which one was meant cannot be known.
      repeated.push({ path: `header.${param.name}`, message: `was sent ${value.length} times; send it once` });
      continue;
    }
    decoded[param.in][param.name] = coerce(param.type, value);
  }
  const paramsValid = validator(route.validators.params);
  const errors = paramsValid(decoded) ? repeated : [...repeated, ...fieldErrors(paramsValid.errors, "")];
  if (route.body) {
    if (raw.body === undefined) {
      if (route.body.required) errors.push({ path: "body", message: "is required: send a JSON object" });
    } else if (route.validators.body && !(raw.body instanceof SpooledBody) && !(raw.body instanceof StreamedBody)) {
      // A spooled body (a bundle) is checked by whoever reads them; the validator describes the JSON body.
      const bodyValid = validator(route.validators.body);
      if (!bodyValid(raw.body)) errors.push(...fieldErrors(bodyValid.errors, "body"));
    }
  }
  if (errors.length) {
    const summary = errors.slice(0, 5).map((e) => `${e.path} ${e.message}`).join("; ");
    throw new ProblemError("validation", `${summary}${errors.length > 5 ? `; and ${errors.length - 5} more` : ""}`, {
      errors,
    });
  }
  return decoded;
}
