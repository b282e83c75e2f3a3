/** The nesting bound of JSON request bodies, checked at the edge for every operation. */

/** The deepest nesting of arrays and objects a request body may have. */
export const MAX_JSON_DEPTH = 512;

/**
 * Whether `value` (parsed JSON) nests arrays and objects more than `limit` levels deep. Walks with an
 * explicit stack and stops at the first node past the limit, so a hostile body costs no recursion.
 */
export function nestsDeeperThan(value: unknown, limit: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length) {
    const [node, depth] = stack.pop()!;
    if (node === null || typeof node !== "object") continue;
    if (depth > limit) return true;
    for (const child of Array.isArray(node) ? node : Object.values(node)) {
      if (child !== null && typeof child === "object") stack.push([child, depth + 1]);
    }
  }
  return false;
}
