/**
 * The floor of the `cores` scenario: bare `node:http` answering the echo call's JSON (a run id and the
 * result), no platform. `WORKERS` processes share `PORT` through node:cluster (one by default).
 */
import cluster from "node:cluster";
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";

const workers = Number(process.env.WORKERS ?? 1);

function serve(): void {
  createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const kwargs = (text ? JSON.parse(text) : {}) as { name?: string };
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify({ run_id: `run_${randomUUID()}`, result: { hello: kwargs.name ?? "world" } }));
    });
  }).listen(Number(process.env.PORT), "127.0.0.1");
}

if (cluster.isPrimary && workers > 1) {
  for (let i = 0; i < workers; i++) cluster.fork();
  process.on("SIGTERM", () => {
    for (const worker of Object.values(cluster.workers ?? {})) worker?.kill("SIGKILL");
    process.exit(0);
  });
} else {
  serve();
}
