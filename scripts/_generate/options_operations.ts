/**
 * TypeSpec has no OPTIONS verb. An operation that needs one is declared as a `@get` with the extension
 * `x-runplane-method: options` at a TypeSpec-only route ending in `/x-runplane-options`; this step moves
 * it to the `options` method of the route without that ending (dropping the extension and the TypeSpec-only
 * path), so the contract, the types, the validators and the route table see an OPTIONS operation.
 */
import type { OpenApiDocument } from "./compile_spec.ts";

const MARKER = "/x-runplane-options";

/** Moves each marked operation to its route's `options` method; returns the document. */
export function moveOptionsOperations(document: OpenApiDocument): OpenApiDocument {
  for (const [path, item] of Object.entries(document.paths)) {
    if (!path.endsWith(MARKER)) continue;
    const operation = item.get;
    if (!operation || operation["x-runplane-method"] !== "options" || Object.keys(item).length !== 1) {
      throw new Error(
        `${path}: only one GET marked x-runplane-method: options may be declared at a route ending ${MARKER}`,
      );
    }
    const target = path.slice(0, -MARKER.length);
    const existing = document.paths[target];
    if (!existing) throw new Error(`${path}: no route ${target} to move its OPTIONS operation to`);
    if (existing.options) throw new Error(`${target} has an OPTIONS operation already`);
    delete operation["x-runplane-method"];
    existing.options = operation;
    delete document.paths[path];
  }
  return document;
}
