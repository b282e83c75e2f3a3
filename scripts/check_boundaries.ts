/**
 * The import-boundary check of `npm run check`: reads every TypeScript file's imports (type-only and
 * dynamic ones included) and fails with each import that breaks a rule of the house, naming the rule's
 * reason. The rules are the layering docs/architecture.md describes:
 *
 * - domain folders of `server/` (`host`, `sandbox` and `gpus` among them) import no Koa and nothing of
 *   `server/http`, `server/handlers` or `server/config.ts` (they take plain inputs, so the CLI and tests
 *   reuse them without HTTP);
 * - `server/sandbox` and `server/gpus` are leaves: they import nothing of `server/` outside their own
 *   folder but the logger's type (`server/log.ts`), so the runtime, the builder and the placement layer
 *   use them and they know nothing of runs, replicas or hosts;
 * - the composition root (`server/mod.ts`, wired by `server/wiring/`) is imported by nothing under
 *   `server/` but `server/main.ts` and `server/cli/`, and `server/wiring/` only by `server/mod.ts`
 *   (the supervisor and workers of `server/host/` are handed `createServer` instead);
 * - the placement layer (`server/placement/`, where a call runs) may import domain folders, and no
 *   domain folder imports it (nor `server/wiring/`);
 * - `server/runs` and `server/runtime` do not import each other (the placement layer,
 *   `server/placement/runtime_executor.ts`, adapts the runtime to the runs' executor, so either can
 *   change alone);
 * - `client/` imports nothing of `server/` (the published client and the commands that talk to a server
 *   must not load the server);
 * - a private file (a name, or a folder on its path, starting with `_`) is imported only from inside the
 *   folder that holds it, or by the tests of that folder (`test/<name>/` tests `server/<name>/`'s insides);
 * - there are no import cycles;
 * - SQL text lives under `server/store/` (its `statements/` hold the runs', deliveries' and deployments'
 *   statements, each once per engine where they differ): a domain folder imports no `rawStatement`,
 *   `DialectStatement` or Kysely's `sql`, and writes no string that reads as a statement. Kysely's
 *   builder (portable, checked by the compiler) stays where the domain uses it.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import ts from "typescript";

/** One import of one file. */
export interface ImportEdge {
  /** The importing file, relative to the root, with `/` separators. */
  from: string;
  /** The import's text as written. */
  specifier: string;
  /** The imported file relative to the root, for relative imports; null for packages. */
  to: string | null;
  line: number;
}

/** An import that breaks a rule. */
export interface BoundaryViolation {
  edge: ImportEdge;
  rule: string;
  reason: string;
}

/** Domain folders of `server/`: free of HTTP and of the server's settings. */
export const DOMAIN_FOLDERS = [
  "abort",
  "auth",
  "builds",
  "cluster",
  "deadline",
  "deployments",
  "gpus",
  "host",
  "images",
  "integrations",
  "json",
  "keys",
  "lines",
  "metrics",
  "problems",
  "project_secrets",
  "random",
  "runs",
  "runtime",
  "sandbox",
  "secrets",
  "store",
  "ticker",
  "webhooks",
];

const HTTP_PACKAGES = new Set(["koa", "find-my-way", "co-body"]);

/** Domains that must not know each other: the placement layer (`server/placement/`) connects them. */
const SEPARATE_DOMAINS: Array<[string, string]> = [["runs", "runtime"]];

/** Domain folders that are leaves: they import nothing of `server/` outside themselves but `LEAF_MAY_IMPORT`. */
export const LEAF_FOLDERS = ["gpus", "lines", "sandbox"];

/** What a leaf folder may import of the rest of `server/`: the logger's type. */
const LEAF_MAY_IMPORT = new Set(["server/log.ts"]);

/** The composition root, and what alone may import it (`server/main.ts` and `server/cli/`). */
const COMPOSITION_ROOT = "server/mod.ts";

function mayImportCompositionRoot(from: string): boolean {
  return !from.startsWith("server/") || from === "server/main.ts" || from.startsWith("server/cli/");
}

function toPosix(path: string): string {
  return path.split(sep).join("/");
}

function sourceFiles(root: string, dir: string): string[] {
  if (!existsSync(join(root, dir))) return [];
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = dir ? `${dir}/${entry.name}` : entry.name;
    if (entry.isDirectory()) {
      return entry.name === "node_modules" || entry.name.startsWith(".")
        ? []
        : sourceFiles(root, path);
    }
    return /\.(ts|mts)$/.test(entry.name) && !entry.name.endsWith(".d.ts") ? [path] : [];
  });
}

/** Every import of the TypeScript files under `folders` of `root`. */
export function readImports(root: string, folders: readonly string[]): ImportEdge[] {
  const edges: ImportEdge[] = [];
  for (const file of folders.flatMap((folder) => sourceFiles(root, folder))) {
    const text = readFileSync(join(root, file), "utf8");
    const info = ts.preProcessFile(text, true, true);
    for (const imported of info.importedFiles) {
      const specifier = imported.fileName;
      const line = text.slice(0, imported.pos).split("\n").length;
      const to = specifier.startsWith(".") ? toPosix(relative(root, resolve(root, dirname(file), specifier))) : null;
      edges.push({ from: file, specifier, to, line });
    }
  }
  return edges;
}

/** The folder a private path belongs to: the parent of its first `_` segment; null when it is public. */
function privateOwner(path: string): string | null {
  const parts = path.split("/");
  const index = parts.findIndex((part) => part.startsWith("_"));
  return index < 0 ? null : parts.slice(0, index).join("/");
}

/** Whether `from` is a test of the server folder `owner`: `test/runtime/x_test.ts` tests `server/runtime/`. */
function testsOf(from: string, owner: string): boolean {
  const match = /^test\/([^/]+)\//.exec(from);
  return match !== null && owner === `server/${match[1]}`;
}

function domainOf(path: string): string | null {
  const match = /^server\/([^/]+)\//.exec(path);
  return match && DOMAIN_FOLDERS.includes(match[1]) ? match[1] : null;
}

/** The imports of `edges` that break a layering rule (cycles are `findCycles`'s). */
export function findViolations(edges: readonly ImportEdge[]): BoundaryViolation[] {
  const violations: BoundaryViolation[] = [];
  for (const edge of edges) {
    const domain = domainOf(edge.from);
    if (domain && edge.to === null && HTTP_PACKAGES.has(edge.specifier)) {
      violations.push({
        edge,
        rule: "domain-no-http",
        reason: `server/${domain}/ is a domain module: it must not import ${edge.specifier} (only server/http does)`,
      });
    }
    if (domain && edge.to !== null && /^server\/(http|handlers)\/|^server\/config\.ts$/.test(edge.to)) {
      violations.push({
        edge,
        rule: "domain-no-http",
        reason:
          `server/${domain}/ is a domain module: it must not import ${edge.to} (take plain inputs instead; the composition root wires settings and HTTP)`,
      });
    }
    violations.push(...layerViolations(edge, domain));
    const target = edge.to === null ? null : domainOf(edge.to);
    if (
      domain && target
      && SEPARATE_DOMAINS.some(([a, b]) => (a === domain && b === target) || (a === target && b === domain))
    ) {
      violations.push({
        edge,
        rule: "separate-domains",
        reason:
          `server/${domain}/ and server/${target}/ must not import each other: the placement layer (server/placement/) adapts one to the other`,
      });
    }
    if (edge.from.startsWith("client/") && edge.to?.startsWith("server/")) {
      violations.push({
        edge,
        rule: "client-no-server",
        reason:
          "client/ must not import server/: the published client and the CLI's client commands must not load the server",
      });
    }
    const owner = edge.to === null ? null : privateOwner(edge.to);
    if (
      owner !== null && !edge.from.startsWith(`${owner}/`) && !(owner === "" && !edge.from.includes("/"))
      && !testsOf(edge.from, owner)
    ) {
      violations.push({
        edge,
        rule: "private-file",
        reason: `${edge.to} is private to ${
          owner || "the root"
        }/ (a leading _): import it through that folder's mod.ts`,
      });
    }
  }
  return violations;
}

/** The imports of `edge` that break the layering around the composition root and the leaf folders. */
function layerViolations(edge: ImportEdge, domain: string | null): BoundaryViolation[] {
  const to = edge.to;
  if (to === null) return [];
  const violations: BoundaryViolation[] = [];
  if (to === COMPOSITION_ROOT && !mayImportCompositionRoot(edge.from)) {
    violations.push({
      edge,
      rule: "composition-root",
      reason:
        "server/mod.ts is the composition root: under server/ only server/main.ts and server/cli/ import it (pass what is needed in, as main.ts hands server/host/ createServer)",
    });
  }
  const wiredFrom = edge.from === COMPOSITION_ROOT || edge.from.startsWith("server/wiring/");
  if (to.startsWith("server/wiring/") && edge.from.startsWith("server/") && !wiredFrom) {
    violations.push({
      edge,
      rule: "composition-root",
      reason: "server/wiring/ is the composition root's: under server/ only server/mod.ts imports it",
    });
  }
  if (domain && /^server\/(placement|wiring)\//.test(to)) {
    violations.push({
      edge,
      rule: "placement-above-domains",
      reason:
        `server/${domain}/ is a domain folder: it must not import ${to} (the placement layer and the wiring sit above the domains and import them, never the other way)`,
    });
  }
  const leaf = LEAF_FOLDERS.find((folder) => edge.from.startsWith(`server/${folder}/`));
  if (leaf && to.startsWith("server/") && !to.startsWith(`server/${leaf}/`) && !LEAF_MAY_IMPORT.has(to)) {
    violations.push({
      edge,
      rule: "leaf-folder",
      reason:
        `server/${leaf}/ is a leaf: it imports nothing of server/ outside itself but server/log.ts (take what it needs as plain inputs)`,
    });
  }
  return violations;
}

/** Every import cycle among `edges` (relative imports only), each as the files around the loop. */
export function findCycles(edges: readonly ImportEdge[]): string[][] {
  const graph = new Map<string, string[]>();
  for (const edge of edges) {
    if (edge.to === null) continue;
    graph.set(edge.from, [...(graph.get(edge.from) ?? []), edge.to]);
  }
  // Tarjan's strongly connected components; a component of two or more files (or a file importing
  // itself) is a cycle.
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  function visit(node: string): void {
    index.set(node, counter);
    low.set(node, counter++);
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) low.set(node, Math.min(low.get(node)!, index.get(next)!));
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== node);
    if (component.length > 1 || graph.get(node)?.includes(node)) cycles.push(component.sort());
  }
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return cycles;
}

/** What only `server/store/` may import: the makers of SQL text. */
const SQL_MAKERS = new Map([
  ["rawStatement", "server/store"],
  ["DialectStatement", "server/store"],
  ["portableQuery", "server/store"],
  ["sql", "kysely"],
]);

/** A string that reads as a statement: a SQL verb, then the clause that verb needs. */
const STATEMENT_TEXT = new RegExp(
  [
    String.raw`^\s*select\s[\s\S]*?\sfrom\s+"?\w+"?(\s+(as\s+\S+\s+)?(where|order|group|limit|join|left|inner)\b|\s*$)`,
    String.raw`^\s*insert\s+into\s`,
    String.raw`^\s*update\s+"?\w+"?\s+set\s`,
    String.raw`^\s*delete\s+from\s`,
    String.raw`^\s*with\s+"?\w+"?\s+as\s*\(`,
  ].join("|"),
  "i",
);

/** The places in domain files (outside `server/store/`) that import a maker of SQL text or write one. */
export function findSqlText(root: string): string[] {
  const lines: string[] = [];
  for (const file of sourceFiles(root, "server")) {
    const domain = domainOf(file);
    if (!domain || domain === "store") continue;
    const text = readFileSync(join(root, file), "utf8");
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
    const at = (node: ts.Node) => `${file}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}`;
    const visit = (node: ts.Node): void => {
      if (ts.isImportSpecifier(node)) {
        const name = (node.propertyName ?? node.name).text;
        const declaration = node.parent.parent.parent as ts.ImportDeclaration;
        const from = (declaration.moduleSpecifier as ts.StringLiteral).text;
        const maker = SQL_MAKERS.get(name);
        if (maker && (from === maker || (maker === "server/store" && from.includes("store/")))) {
          lines.push(`${at(node)}: imports ${name} [domain-no-sql]: SQL text lives under server/store/statements/`);
        }
      }
      if ((ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) && STATEMENT_TEXT.test(node.text)) {
        lines.push(`${at(node)}: a SQL statement [domain-no-sql]: move it to server/store/statements/`);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return lines;
}

/** The check's report lines for the tree at `root`; empty when every rule holds. */
export function boundaryReport(root: string): string[] {
  const edges = readImports(root, ["server", "client", "scripts", "test"]);
  const lines = findViolations(edges).map(({ edge, rule, reason }) =>
    `${edge.from}:${edge.line}: imports "${edge.specifier}" [${rule}]: ${reason}`
  );
  lines.push(...findSqlText(root));
  for (const cycle of findCycles(edges)) {
    lines.push(`import cycle [no-cycles]: ${cycle.join(" -> ")} (type-only imports count: move the shared types)`);
  }
  return lines;
}

if (process.argv[1]?.endsWith("check_boundaries.ts")) {
  const lines = boundaryReport(join(import.meta.dirname, ".."));
  for (const line of lines) process.stdout.write(`${line}\n`);
  process.stdout.write(lines.length ? `${lines.length} import-boundary problem(s)\n` : "import boundaries hold\n");
  process.exit(lines.length ? 1 : 0);
}
