/**
 * The ready-to-paste curl `runplane deploy` ends with: the app's run URL, the token from the shell's
 * `RUNPLANE_TOKEN` (never the token itself), and a JSON body the function accepts when its parameters
 * are known.
 */
import { exampleValue, type PythonParameter } from "./python_signature.ts";

/** `text` as one shell word in single quotes. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", "'\\''")}'`;
}

/**
 * The curl body for a function with `parameters` (from `pythonParameters`): its required parameters with
 * a value of their type, and a comment naming the optional ones. Unknown parameters (another runtime, a
 * signature not read) give a placeholder and a comment saying to fill it in.
 */
export function exampleBody(parameters: PythonParameter[] | null): { body: string; comment: string } {
  if (parameters === null) {
    return {
      body: '{"<argument>": "<value>"}',
      comment: "  # the function's arguments, as members of a JSON object",
    };
  }
  const required = parameters.filter((p) => !p.optional);
  const optional = parameters.filter((p) => p.optional).map((p) => p.name);
  return {
    body: JSON.stringify(Object.fromEntries(required.map((p) => [p.name, exampleValue(p.annotation)]))),
    comment: optional.length ? `  # optional: ${optional.join(", ")}` : "",
  };
}

/** The ready-to-paste lines that call the deployed app; `parameters` are its function's, when known. */
export function callInstructions(
  apiUrl: string,
  path: { project: string; app: string; function: string },
  parameters: PythonParameter[] | null = null,
): string {
  const url = `${apiUrl.replace(/\/+$/, "")}/v4/${path.project}/${path.app}/${path.function}`;
  const { body, comment } = exampleBody(parameters);
  return [
    `Run URL: ${url}`,
    `  curl -X POST ${url} \\`,
    `    -H "Authorization: Bearer $RUNPLANE_TOKEN" -H 'Content-Type: application/json' -d ${
      shellQuote(body)
    }${comment}`,
  ].join("\n");
}
