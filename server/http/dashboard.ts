/**
 * The dashboard's HTTP side: its static files (its ES modules from `client/dashboard/`, and the packages
 * they import, `openapi-fetch` and `eventsource-parser`, from node_modules; no bundler), strict security
 * headers, and the session.
 *
 * Signing in posts a token once; the server checks it, records a session (`SessionRecords`, in the
 * store) and answers with an HttpOnly, SameSite=Strict cookie holding the session's id and the token
 * sealed (AES-GCM with the server's secret box), never in clear. A cookie authenticates only while its
 * session is recorded: signing out removes the record, so a copy of the cookie taken before stops
 * working too, in every process. The browser then
 * calls the public REST and run APIs like any client: a request without `Authorization` is authenticated
 * by that cookie, and a state-changing one only when it comes from this origin (`Origin`, or
 * `Sec-Fetch-Site: same-origin`), so a cross-site form cannot act with the user's session.
 */
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { extname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Context, Next } from "koa";
import type { SessionRecords, TokenVerifier } from "../auth/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";

/** The session cookie's name. */
export const SESSION_COOKIE = "runplane_session";

/** The longest a dashboard session lasts (the token's own expiry ends it sooner). */
const SESSION_MAX_MS = 12 * 3_600_000;

const STATIC_DIR = fileURLToPath(new URL("../../client/dashboard/", import.meta.url));

/**
 * The packages the dashboard's modules import by name, each file at a fixed path below
 * `/dashboard/assets/vendor/` (the import map in `index.html` names them): served from `node_modules` as
 * npm installed them, so nothing is vendored or built.
 */
const VENDOR_FILES: Record<string, string> = {
  "openapi-fetch.mjs": fileURLToPath(import.meta.resolve("openapi-fetch")),
  "eventsource-parser/stream.js": fileURLToPath(import.meta.resolve("eventsource-parser/stream")),
  // `stream.js` imports `./index.js`.
  "eventsource-parser/index.js": fileURLToPath(import.meta.resolve("eventsource-parser")),
  // An app's charts (app_insights.js): uPlot's ES module and its stylesheet.
  "uplot.mjs": fileURLToPath(import.meta.resolve("uplot/dist/uPlot.esm.js")),
  "uplot.css": fileURLToPath(import.meta.resolve("uplot/dist/uPlot.min.css")),
};

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
};

/**
 * The Content-Security-Policy: only the server's own scripts and styles, and the inline scripts whose
 * hashes are given (the page's import map, which a browser reads only inline).
 */
function contentSecurityPolicy(scriptHashes: string[] = []): string {
  const scripts = ["'self'", ...scriptHashes.map((hash) => `'sha256-${hash}'`)].join(" ");
  return `default-src 'none'; script-src ${scripts}; style-src 'self'; img-src 'self' data:; connect-src 'self'; `
    + "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
}

/** The SHA-256 (base64) of each inline `<script>` of `html`, for the page's CSP. */
function inlineScriptHashes(html: string): string[] {
  return [...html.matchAll(/<script\b[^>]*>([^<]+)<\/script>/g)].map((match) =>
    createHash("sha256").update(match[1], "utf8").digest("base64")
  );
}

/** Only the server's own scripts and styles; no framing, no referrer, no sniffing. */
const SECURITY_HEADERS: Record<string, string> = {
  "Content-Security-Policy": contentSecurityPolicy(),
  "X-Content-Type-Options": "nosniff",
  "Referrer-Policy": "no-referrer",
  "X-Frame-Options": "DENY",
  "Cross-Origin-Opener-Policy": "same-origin",
  "Cross-Origin-Resource-Policy": "same-origin",
};

/** What a sealed session holds. */
interface Session {
  /** The session's record (`SessionRecords`). */
  id: string;
  token: string;
  /** Unix ms. */
  expiresAt: number;
}

/** Dashboard sessions: sealing cookies and reading them back. */
export interface DashboardSessions {
  /**
   * The bearer token of the request's session cookie, or undefined (no cookie, one that does not open,
   * or a session that was ended). Throws a 403 problem for a state-changing request from another origin.
   */
  tokenOf(ctx: Context): Promise<string | undefined>;
}

/** Whether the request comes from a page of this server (for state-changing requests). */
function sameOrigin(ctx: Context): boolean {
  const origin = ctx.get("Origin");
  // Not `ctx.origin`: in Koa 3 that is the request's Origin header itself.
  if (origin) return origin === `${ctx.protocol}://${ctx.host}`;
  return ctx.get("Sec-Fetch-Site") === "same-origin";
}

function isSafeMethod(method: string): boolean {
  return method === "GET" || method === "HEAD" || method === "OPTIONS";
}

function crossSite(): ProblemError {
  return new ProblemError(
    "forbidden",
    "A dashboard session acts only from the dashboard's own pages: this request came from another origin",
  );
}

/**
 * Creates the sessions: cookies sealed with `secrets`, sessions recorded in `records`. `open` reads a
 * cookie's session without asking whether it was ended; `live` asks too.
 */
export function createDashboardSessions(secrets: SecretBox, records: SessionRecords): DashboardSessions & {
  records: SessionRecords;
  seal(session: Session): string;
  open(value: string): Session | undefined;
  live(ctx: Context): Promise<Session | undefined>;
} {
  function open(value: string): Session | undefined {
    try {
      const session = JSON.parse(secrets.open(value)) as Session;
      // A cookie sealed before sessions were recorded has no id: it opens to nothing.
      return typeof session.id === "string" && session.expiresAt > Date.now() ? session : undefined;
    } catch {
      return undefined;
    }
  }
  async function live(ctx: Context): Promise<Session | undefined> {
    const value = ctx.cookies.get(SESSION_COOKIE);
    const session = value ? open(value) : undefined;
    return session && (await records.isLive(session.id)) ? session : undefined;
  }
  return {
    records,
    seal: (session) => secrets.seal(JSON.stringify(session)),
    open,
    live,
    async tokenOf(ctx) {
      const session = await live(ctx);
      if (!session) return undefined;
      if (!isSafeMethod(ctx.method) && !sameOrigin(ctx)) throw crossSite();
      return session.token;
    },
  };
}

/**
 * Sets (or, with an empty value and a past date, ends) the session cookie: HttpOnly, SameSite=Strict,
 * and Secure when the page was reached over https — directly, or through a proxy that says so in
 * `X-Forwarded-Proto` (a lying header can only make the browser keep the cookie to https). Written by
 * hand because Koa's cookie jar refuses a Secure cookie on the proxy's plain-http hop.
 */
function setSessionCookie(ctx: Context, cookie: { value: string; expires: Date }): void {
  const https = ctx.secure || ctx.get("X-Forwarded-Proto").split(",")[0].trim() === "https";
  ctx.append(
    "Set-Cookie",
    `${SESSION_COOKIE}=${cookie.value}; Path=/; Expires=${cookie.expires.toUTCString()}; HttpOnly; SameSite=Strict${
      https ? "; Secure" : ""
    }`,
  );
}

async function serveFile(ctx: Context, path: string, cache: string): Promise<void> {
  const body = await readFile(path).catch(() => undefined);
  if (!body) throw new ProblemError("not-found", `No dashboard file ${ctx.path}`);
  ctx.set("Cache-Control", cache);
  ctx.type = TYPES[extname(path)] ?? "application/octet-stream";
  ctx.body = body;
}

/** The page (every path of the dashboard's pages is the same HTML), its CSP allowing its import map. */
async function servePage(ctx: Context): Promise<void> {
  await serveFile(ctx, join(STATIC_DIR, "index.html"), "no-store");
  const html = (ctx.body as Buffer).toString("utf8");
  ctx.set("Content-Security-Policy", contentSecurityPolicy(inlineScriptHashes(html)));
}

/**
 * The dashboard's routes as one Koa middleware: `/dashboard` and its pages (the same HTML; the script
 * reads the path), `/dashboard/assets/*`, and `POST /dashboard/session` (sign in: `{token}`),
 * `GET /dashboard/session` (who is signed in), `POST /dashboard/session/end` (sign out).
 */
export function dashboardMiddleware(
  options: { sessions: ReturnType<typeof createDashboardSessions>; verifier: TokenVerifier },
) {
  const { sessions, verifier } = options;

  async function signIn(ctx: Context, body: unknown): Promise<void> {
    if (!sameOrigin(ctx)) throw crossSite();
    const given = (body as { token?: unknown } | null)?.token;
    const token = typeof given === "string" ? given.trim() : "";
    if (!token) {
      throw new ProblemError("validation", "Paste a service-account token to sign in", {
        errors: [{ path: "body.token", message: "is required" }],
      });
    }
    const principal = await verifier.verify(token);
    const expiresAt = Math.min(principal.expiresAt * 1000, Date.now() + SESSION_MAX_MS);
    const id = await sessions.records.start({ serviceAccountId: principal.serviceAccountId, expiresAt });
    setSessionCookie(ctx, { value: sessions.seal({ id, token, expiresAt }), expires: new Date(expiresAt) });
    ctx.body = whoAmI(principal, expiresAt);
  }

  function whoAmI(principal: { projectId: string; scopes: string[]; serviceAccountId: string }, expiresAt: number) {
    return {
      project_id: principal.projectId,
      service_account_id: principal.serviceAccountId,
      scopes: principal.scopes,
      expires_at: new Date(expiresAt).toISOString(),
    };
  }

  return async function dashboard(ctx: Context, next: Next): Promise<void> {
    if (ctx.path !== "/dashboard" && !ctx.path.startsWith("/dashboard/")) return await next();
    ctx.set(SECURITY_HEADERS);
    const rest = ctx.path.slice("/dashboard".length);
    if (rest === "/session") {
      ctx.set("Cache-Control", "no-store");
      if (ctx.method === "POST") return await signIn(ctx, await readJsonBody(ctx));
      if (ctx.method !== "GET") throw new ProblemError("method-not-allowed", "Use GET or POST");
      const session = await sessions.live(ctx);
      if (!session) throw new ProblemError("unauthorized", "Not signed in: paste a token on the sign-in page");
      ctx.body = whoAmI(await verifier.verify(session.token), session.expiresAt);
      return;
    }
    if (rest === "/session/end") {
      if (ctx.method !== "POST") throw new ProblemError("method-not-allowed", "Use POST");
      if (!sameOrigin(ctx)) throw crossSite();
      const value = ctx.cookies.get(SESSION_COOKIE);
      const session = value ? sessions.open(value) : undefined;
      // Ended in the store first: a cookie cleared in this browser but kept elsewhere must not go on.
      if (session) await sessions.records.end(session.id);
      setSessionCookie(ctx, { value: "", expires: new Date(0) });
      ctx.status = 204;
      return;
    }
    if (ctx.method !== "GET" && ctx.method !== "HEAD") throw new ProblemError("method-not-allowed", "Use GET");
    const vendor = rest.slice("/assets/vendor/".length);
    if (rest.startsWith("/assets/vendor/") && Object.hasOwn(VENDOR_FILES, vendor)) {
      return await serveFile(ctx, VENDOR_FILES[vendor], "public, max-age=3600");
    }
    const asset = /^\/assets\/([a-z0-9_]+\.(?:js|css|svg))$/.exec(rest);
    if (asset) return await serveFile(ctx, join(STATIC_DIR, asset[1]), "no-cache");
    if (rest.startsWith("/assets/")) throw new ProblemError("not-found", `No dashboard file ${ctx.path}`);
    await servePage(ctx);
  };
}

/** A small JSON body (a token): at most 16 KiB. */
async function readJsonBody(ctx: Context): Promise<unknown> {
  if (!ctx.is("application/json")) {
    throw new ProblemError("unsupported-media-type", 'Send the token as JSON: {"token": "…"}');
  }
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of ctx.req) {
    size += (chunk as Buffer).length;
    if (size > 16 * 1024) throw new ProblemError("content-too-large", "A sign-in body is at most 16 KiB");
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new ProblemError("malformed-json", "The body is not JSON");
  }
}
