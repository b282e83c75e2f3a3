/**
 * The function-length ratchet of `npm run check`: measures every function of the product code (function
 * declarations, methods, constructors, accessors, arrow functions and function expressions under
 * `server/` and `client/`, the dashboard's JavaScript included; not tests, scripts or generated code) and
 * fails on
 *
 * - a function longer than `MAX_FUNCTION_LINES` that is not listed in `scripts/long_functions.json`, and
 * - a listed function that is now `MAX_FUNCTION_LINES` or shorter, or gone: the list only shrinks, so
 *   remove it from the list (`--update` does).
 *
 * A function's length is the lines from its first (its signature, not its doc comment) to its last,
 * both included; a function nested in another counts in both. A function is keyed `<file>#<name>`, its
 * name qualified by what encloses it (`createRunService.executeSync`, `RunQueue.claim`), so that the key
 * survives edits elsewhere in the file. An anonymous function is named after what receives it:
 * `createServer.app.use(…)` for a callback, `<default>` for a default export; a name taken twice in a
 * file gets `#2`, `#3` in order.
 *
 * `--update` removes the entries that no longer need to be listed and never adds one: a function that
 * grows past the limit is shortened, not listed.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, sep } from "node:path";
import ts from "typescript";

/** The longest a function may be without being listed, in lines. */
export const MAX_FUNCTION_LINES = 120;

/** The folders that hold product code, relative to the root. */
export const PRODUCT_FOLDERS = ["server", "client"];

/** The list of today's offenders, relative to the root. */
export const LONG_FUNCTIONS_FILE = "scripts/long_functions.json";

const SOURCE_EXTENSIONS = [".ts", ".mts", ".js", ".mjs"];

/** One measured function. */
export interface FunctionLength {
  /** `<file>#<qualified name>`: what the list names it by. */
  key: string;
  /** The file, relative to the root, with `/` separators. */
  file: string;
  /** Its qualified name (see the module's comment). */
  name: string;
  /** Its first line, 1-based. */
  line: number;
  /** Lines from its first to its last, both included. */
  lines: number;
}

/** `scripts/long_functions.json`: the functions allowed past the limit, with their length when listed. */
export interface LongFunctionList {
  /** Why the list exists and how it changes. */
  note?: string;
  /** Length in lines by key, when it was listed. */
  functions: Record<string, number>;
}

function toPosix(path: string): string {
  return path.split(sep).join("/");
}

function sourceFiles(root: string, dir: string): string[] {
  if (!existsSync(join(root, dir))) return [];
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) {
      return entry.name === "node_modules" || entry.name.startsWith(".") ? [] : sourceFiles(root, path);
    }
    const isSource = SOURCE_EXTENSIONS.some((extension) => entry.name.endsWith(extension));
    return isSource && !entry.name.endsWith(".d.ts") ? [path] : [];
  }).sort();
}

/** A function-like node this check measures. */
type Measured =
  | ts.FunctionDeclaration
  | ts.MethodDeclaration
  | ts.ConstructorDeclaration
  | ts.GetAccessorDeclaration
  | ts.SetAccessorDeclaration
  | ts.ArrowFunction
  | ts.FunctionExpression;

function isMeasured(node: ts.Node): node is Measured {
  return ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node) || ts.isConstructorDeclaration(node)
    || ts.isGetAccessorDeclaration(node) || ts.isSetAccessorDeclaration(node) || ts.isArrowFunction(node)
    || ts.isFunctionExpression(node);
}

/** A declaration's name as written (`[Symbol.iterator]` for a computed one); undefined when it has none. */
function nameText(name: ts.PropertyName | ts.BindingName | undefined, source: ts.SourceFile): string | undefined {
  if (!name) return undefined;
  if (ts.isIdentifier(name) || ts.isPrivateIdentifier(name) || ts.isStringLiteral(name)) return name.text;
  if (ts.isNumericLiteral(name)) return name.text;
  return name.getText(source);
}

/** The callee of a call, shortened: `app.use`, `new Promise`. */
function calleeText(call: ts.CallExpression | ts.NewExpression, source: ts.SourceFile): string {
  const text = call.expression.getText(source).replace(/\s+/g, "");
  const shown = text.length > 40 ? `${text.slice(0, 39)}…` : text;
  return ts.isNewExpression(call) ? `new ${shown}` : shown;
}

/**
 * The name a function-like node goes by in its scope: its own, else what it is assigned or given to.
 * A class, an object literal property or a variable also name a scope for what they hold.
 */
function ownName(node: Measured, source: ts.SourceFile): string {
  if (ts.isConstructorDeclaration(node)) return "constructor";
  if (ts.isGetAccessorDeclaration(node)) return `get ${nameText(node.name, source)}`;
  if (ts.isSetAccessorDeclaration(node)) return `set ${nameText(node.name, source)}`;
  const own = nameText(node.name, source);
  if (own && !ts.isArrowFunction(node)) return own;
  let parent = node.parent;
  while (ts.isParenthesizedExpression(parent) || ts.isAsExpression(parent) || ts.isSatisfiesExpression(parent)) {
    parent = parent.parent;
  }
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent)) {
    return nameText(parent.name, source) ?? "<anonymous>";
  }
  if (ts.isBinaryExpression(parent) && parent.operatorToken.kind === ts.SyntaxKind.EqualsToken) {
    return parent.left.getText(source).replace(/\s+/g, "");
  }
  if ((ts.isCallExpression(parent) || ts.isNewExpression(parent)) && parent.expression !== node) {
    return `${calleeText(parent, source)}(…)`;
  }
  if (ts.isExportAssignment(parent)) return "<default>";
  if (ts.isFunctionDeclaration(node) && node.modifiers?.some((m) => m.kind === ts.SyntaxKind.DefaultKeyword)) {
    return "<default>";
  }
  return "<anonymous>";
}

/** The name a class, or an object literal given a name, gives the scope of what it holds, if any. */
function scopeName(node: ts.Node, source: ts.SourceFile): string | undefined {
  const holder = node.parent && (ts.isVariableDeclaration(node.parent) || ts.isPropertyAssignment(node.parent))
    ? nameText(node.parent.name, source)
    : undefined;
  if (ts.isClassDeclaration(node) || ts.isClassExpression(node)) return nameText(node.name, source) ?? holder;
  if (ts.isObjectLiteralExpression(node)) return holder;
  return undefined;
}

/** Measures every function of one file's text; `file` is its path as keys show it. */
export function measureSource(file: string, text: string): FunctionLength[] {
  const kind = file.endsWith(".js") || file.endsWith(".mjs") ? ts.ScriptKind.JS : ts.ScriptKind.TS;
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind);
  const found: FunctionLength[] = [];
  const taken = new Map<string, number>();
  const lineOf = (position: number) => source.getLineAndCharacterOfPosition(position).line + 1;
  function visit(node: ts.Node, scope: string[]): void {
    let inner = scope;
    if (isMeasured(node)) {
      const qualified = [...scope, ownName(node, source)].join(".");
      const seen = (taken.get(qualified) ?? 0) + 1;
      taken.set(qualified, seen);
      const name = seen === 1 ? qualified : `${qualified}#${seen}`;
      const line = lineOf(node.getStart(source));
      found.push({ key: `${file}#${name}`, file, name, line, lines: lineOf(node.getEnd()) - line + 1 });
      inner = [name];
    } else {
      const named = scopeName(node, source);
      if (named) inner = [...scope, named];
    }
    ts.forEachChild(node, (child) => visit(child, inner));
  }
  visit(source, []);
  return found;
}

/** Measures every function in `folders` (default `PRODUCT_FOLDERS`) under `root`. */
export function measureFunctions(root: string, folders: readonly string[] = PRODUCT_FOLDERS): FunctionLength[] {
  return folders.flatMap((folder) => sourceFiles(root, folder)).flatMap((file) =>
    measureSource(toPosix(file), readFileSync(join(root, file), "utf8"))
  );
}

/** The functions of `measured` longer than `MAX_FUNCTION_LINES`, longest first. */
export function longFunctions(measured: readonly FunctionLength[]): FunctionLength[] {
  return measured.filter((f) => f.lines > MAX_FUNCTION_LINES).sort((a, b) =>
    b.lines - a.lines || a.key.localeCompare(b.key)
  );
}

/** The check's report lines for `measured` against `list`; empty when the ratchet holds. */
export function ratchetReport(measured: readonly FunctionLength[], list: LongFunctionList): string[] {
  const lines: string[] = [];
  const byKey = new Map(measured.map((f) => [f.key, f]));
  for (const f of longFunctions(measured)) {
    if (f.key in list.functions) continue;
    lines.push(
      `${f.file}:${f.line}: ${f.name} is ${f.lines} lines, over ${MAX_FUNCTION_LINES} and not in ${LONG_FUNCTIONS_FILE}: `
        + "split it (the list takes no new entries)",
    );
  }
  for (const key of Object.keys(list.functions).sort()) {
    const f = byKey.get(key);
    if (!f) {
      lines.push(`${key} is listed in ${LONG_FUNCTIONS_FILE} but is gone: remove it from the list (--update does)`);
    } else if (f.lines <= MAX_FUNCTION_LINES) {
      lines.push(
        `${f.file}:${f.line}: ${f.name} is ${f.lines} lines now, at most ${MAX_FUNCTION_LINES}: `
          + `remove it from ${LONG_FUNCTIONS_FILE} (--update does)`,
      );
    }
  }
  return lines;
}

/** `list` without the entries `measured` no longer needs (functions gone or now short enough); adds none. */
export function shrunkList(measured: readonly FunctionLength[], list: LongFunctionList): LongFunctionList {
  const long = new Set(longFunctions(measured).map((f) => f.key));
  const functions = Object.fromEntries(Object.entries(list.functions).filter(([key]) => long.has(key)));
  return { ...list, functions };
}

/** Reads the list at `path` (the check reads the root's `LONG_FUNCTIONS_FILE`); a missing file lists nothing. */
export function readList(path: string): LongFunctionList {
  if (!existsSync(path)) return { functions: {} };
  const parsed = JSON.parse(readFileSync(path, "utf8")) as Partial<LongFunctionList>;
  return { ...parsed, functions: parsed.functions ?? {} };
}

/** The list as the file holds it: sorted by key, two-space JSON, a final newline. */
export function listText(list: LongFunctionList): string {
  const functions = Object.fromEntries(Object.entries(list.functions).sort(([a], [b]) => a.localeCompare(b)));
  return `${JSON.stringify({ ...list, functions }, null, 2)}\n`;
}

if (process.argv[1]?.endsWith("check_function_length.ts")) {
  const root = join(import.meta.dirname, "..");
  const listPath = join(root, LONG_FUNCTIONS_FILE);
  const measured = measureFunctions(root);
  let list = readList(listPath);
  if (process.argv.includes("--update")) {
    const shrunk = shrunkList(measured, list);
    const removed = Object.keys(list.functions).filter((key) => !(key in shrunk.functions));
    for (const key of removed) process.stdout.write(`removed ${key}\n`);
    if (removed.length) writeFileSync(listPath, listText(shrunk));
    list = shrunk;
  }
  const lines = ratchetReport(measured, list);
  for (const line of lines) process.stdout.write(`${line}\n`);
  const listed = Object.keys(list.functions).length;
  process.stdout.write(
    lines.length
      ? `${lines.length} function-length problem(s)\n`
      : `function lengths hold: ${listed} listed function(s) over ${MAX_FUNCTION_LINES} lines, no other\n`,
  );
  process.exit(lines.length ? 1 : 0);
}
