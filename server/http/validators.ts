/** The generated ajv validators, by name, and the mapping of their errors to problem fields. */
import * as generated from "../../generated/validators.cjs";
import type { Validator } from "../../generated/validators.d.cts";
import type { FieldError } from "../problems/mod.ts";

export type { Validator } from "../../generated/validators.d.cts";

const table = generated as unknown as Record<string, Validator>;

/** The generated validator called `name`; throws when the generated files are out of date. */
export function validator(name: string): Validator {
  const found = table[name];
  if (typeof found !== "function") {
    throw new Error(`No generated validator "${name}": run npm run generate`);
  }
  return found;
}

/** `/aptPackages/0` under `body` → `body.aptPackages[0]`. */
function pathOf(prefix: string, pointer: string): string {
  let out = prefix;
  for (const raw of pointer.split("/").slice(1)) {
    const segment = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    out += /^\d+$/.test(segment) ? `[${segment}]` : out ? `.${segment}` : segment;
  }
  return out;
}

/**
 * Turns ajv errors into problem fields: one per failing value, with its path from `prefix`
 * (`body`, or empty for the `{path, query, header}` parameter object).
 */
export function fieldErrors(errors: Validator["errors"], prefix: string): FieldError[] {
  const out: FieldError[] = [];
  const seen = new Set<string>();
  for (const error of errors ?? []) {
    let path = pathOf(prefix, error.instancePath);
    let message = error.message ?? "is not valid";
    if (error.keyword === "required") {
      path = pathOf(prefix, `${error.instancePath}/${String(error.params.missingProperty)}`);
      message = "is required";
    } else if (error.keyword === "unevaluatedProperties" || error.keyword === "additionalProperties") {
      const name = String(error.params.unevaluatedProperty ?? error.params.additionalProperty);
      path = pathOf(prefix, `${error.instancePath}/${name}`);
      message = "is not a known member";
    } else if (error.keyword === "not" && error.instancePath) {
      message = "is not a known member";
    } else if (error.keyword === "anyOf" || error.keyword === "oneOf" || error.keyword === "if") {
      continue;
    }
    const key = `${path}\u0000${message}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ path: path || prefix || "request", message });
  }
  return out;
}
