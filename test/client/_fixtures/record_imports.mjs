// Preloaded with --import: appends the URL of every module the process loads to the file named by
// RECORD_IMPORTS_TO (a resolve hook, after tsx's, writing synchronously so nothing is lost at exit).
import { register } from "node:module";

const hook = `
import { appendFileSync } from "node:fs";
let file;
export function initialize(data) { file = data.file; }
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  appendFileSync(file, resolved.url + "\\n");
  return resolved;
}`;
register(`data:text/javascript,${encodeURIComponent(hook)}`, { data: { file: process.env.RECORD_IMPORTS_TO } });
