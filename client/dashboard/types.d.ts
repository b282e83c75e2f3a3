/**
 * The types the dashboard's modules name in their JSDoc (`import("./types.js").Run`), written once. The
 * contract's come from the generated `generated/api.d.ts`, the same types the server's handlers are
 * checked against: a field the contract renames is a type error in the dashboard. Types only: the
 * browser loads no such module.
 */
import type { components, operations, paths } from "../../generated/api.d.ts";

export type Paths = paths;
export type Schemas = components["schemas"];
export type Run = Schemas["Run"];
export type RunSummary = Schemas["RunSummary"];
export type RunError = Schemas["RunError"];
export type RunStatus = Schemas["RunStatus"];
export type RunMode = Schemas["RunMode"];
export type RunChange = Schemas["RunChange"];
export type RunLogLine = Schemas["RunLogLine"];
export type Problem = Schemas["Problem"];
export type App = Schemas["App"];
export type Deployment = Schemas["Deployment"];
export type ServiceAccount = Schemas["ServiceAccount"];
export type TokenScope = Schemas["TokenScope"];
/** The query of `listProjectRuns`: the runs view's filters. */
export type RunQuery = NonNullable<operations["listProjectRuns"]["parameters"]["query"]>;

/** Who is signed in: the answer of `GET /dashboard/session` (the dashboard's own route, not the contract's). */
export interface Session {
  project_id: string;
  service_account_id: string;
  scopes: TokenScope[];
  expires_at: string;
}

/** What `h` puts in an element: nodes, text (numbers too), nothing, or arrays of these. */
export type Child = Node | string | number | null | undefined | false | readonly Child[];
