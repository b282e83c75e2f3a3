/**
 * The bare-Koa baseline: the same answers as Runplane's hot paths with none of the platform (no auth,
 * no validation, no store, no worker). Started as its own process by the benchmark.
 */
import { createHash, randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import Koa from "koa";

const app = new Koa();

function readBody(req: Koa.Context["req"]): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => (body += chunk));
    req.on("end", () => resolve(body));
    req.on("error", reject);
  });
}

app.use(async (ctx) => {
  if (ctx.path === "/run" && ctx.method === "POST") {
    const input = JSON.parse((await readBody(ctx.req)) || "{}") as { name?: string };
    ctx.type = "application/json";
    ctx.body = JSON.stringify({
      run_id: `run_${randomBytes(13).toString("hex")}`,
      run_time_ms: 0.01,
      result: { hello: input.name ?? "world" },
    });
  } else if (ctx.path === "/accept" && ctx.method === "POST") {
    await readBody(ctx.req);
    ctx.status = 202;
    ctx.type = "application/json";
    ctx.body = JSON.stringify({ run_id: `run_${randomBytes(13).toString("hex")}` });
  } else if (ctx.path === "/hash" && ctx.method === "POST") {
    const body = await readBody(ctx.req);
    ctx.type = "application/json";
    ctx.body = JSON.stringify({
      digest: `sha256:${createHash("sha256").update(body).digest("hex")}`,
      status: "cached",
    });
  } else if (ctx.path === "/stream") {
    const n = Number(ctx.query.n ?? 100_000);
    ctx.type = "text/event-stream; charset=utf-8";
    ctx.req.socket.setNoDelay(true);
    ctx.body = Readable.from((function*() {
      for (let i = 0; i < n; i++) yield `data: {"i":${i}}\n\n`;
    })());
  } else {
    ctx.body = { status: "ok" };
  }
});

app.listen(Number(process.env.PORT), "127.0.0.1");
