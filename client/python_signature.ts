/**
 * The parameters of a top-level function of an app's `main.py`, read from its text (no Python is run), so
 * that the curl `runplane deploy` prints sends a body the function accepts. A signature this reader does
 * not follow gives null, and the caller prints a placeholder instead of a guess.
 */

/** One named parameter: its annotation's text, if any, and whether it has a default. */
export interface PythonParameter {
  name: string;
  annotation: string | undefined;
  optional: boolean;
}

/** What the platform passes by itself: never part of a call's body. */
const PLATFORM_PARAMETERS = new Set(["run_id"]);

/** The text between the parenthesis at `open` and its match, or null when it does not close. */
function enclosed(source: string, open: number): string | null {
  let depth = 0;
  let quote: string | null = null;
  for (let i = open; i < source.length; i++) {
    const c = source[i];
    if (quote) {
      if (c === "\\") i++;
      else if (c === quote) quote = null;
      continue;
    }
    if (c === '"' || c === "'") quote = c;
    else if (c === "#") i = source.indexOf("\n", i) === -1 ? source.length : source.indexOf("\n", i);
    else if ("([{".includes(c)) depth++;
    else if (")]}".includes(c) && --depth === 0) return source.slice(open + 1, i);
  }
  return null;
}

/** Splits `text` at the commas outside brackets and strings, leaving out comments. */
function topLevelParts(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let quote: string | null = null;
  let part = "";
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote) {
      if (c === "\\") {
        part += c + (text[i + 1] ?? "");
        i++;
        continue;
      }
      if (c === quote) quote = null;
    } else if (c === "#") {
      const end = text.indexOf("\n", i);
      i = end === -1 ? text.length : end;
      continue;
    } else if (c === '"' || c === "'") quote = c;
    else if ("([{".includes(c)) depth++;
    else if (")]}".includes(c)) depth--;
    else if (c === "," && depth === 0) {
      parts.push(part);
      part = "";
      continue;
    }
    part += c;
  }
  parts.push(part);
  return parts.map((p) => p.trim()).filter(Boolean);
}

/**
 * The named parameters of `def <name>(…)` (or `async def`) at the top level of `source`, in order; null
 * when there is no such function or its signature has `*args` or positional-only parameters, which a
 * JSON body cannot name. `**kwargs` is left out (it takes any member). The platform's own (`run_id`) too.
 */
export function pythonParameters(source: string, name: string): PythonParameter[] | null {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const definition = new RegExp(`^(?:async[ \\t]+)?def[ \\t]+${escaped}[ \\t]*\\(`, "m").exec(source);
  if (!definition) return null;
  const inside = enclosed(source, definition.index + definition[0].length - 1);
  if (inside === null) return null;
  const parameters: PythonParameter[] = [];
  for (const part of topLevelParts(inside)) {
    if (part === "*" || part.startsWith("**")) continue;
    if (part === "/" || part.startsWith("*")) return null;
    const match = /^([A-Za-z_]\w*)\s*(?::\s*([^=]+?))?\s*(=.*)?$/s.exec(part);
    if (!match) return null;
    if (PLATFORM_PARAMETERS.has(match[1])) continue;
    parameters.push({ name: match[1], annotation: match[2]?.trim(), optional: match[3] !== undefined });
  }
  return parameters;
}

/** A value of the annotated type to put in an example body (a string when the type says nothing). */
export function exampleValue(annotation: string | undefined): unknown {
  const type = (annotation ?? "").replace(/^["']|["']$/g, "").replace(/^typing\./, "").trim();
  if (/^int\b/.test(type)) return 1;
  if (/^float\b/.test(type)) return 1.5;
  if (/^bool\b/.test(type)) return true;
  if (/^(list|List|Sequence|tuple|Tuple|set)\b/.test(type)) return [];
  if (/^(dict|Dict|Mapping)\b/.test(type)) return {};
  return "text";
}
