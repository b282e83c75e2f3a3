/**
 * Reading a deployment's build log from the store: all of it so far, or followed line by line as the
 * build writes it until the build ends.
 */
import type { Kysely } from "kysely";
import type { Database } from "../store/mod.ts";
import { activeIdOf, deploymentRow, type DeploymentRef, deploymentView, isTerminal } from "./_deployment_views.ts";
import { selectLogLines } from "./_records.ts";
import type { DeploymentView } from "./_types.ts";

/** The build log so far, one line per line; a 404 when the app has no such deployment. */
export async function buildLogText(db: Kysely<Database>, ref: DeploymentRef): Promise<string> {
  await deploymentRow(db, ref);
  const lines: string[] = [];
  for (let after = 0;;) {
    const batch = await selectLogLines(db, { deploymentId: ref.deploymentId, afterSeq: after, limit: 5000 });
    for (const l of batch) lines.push(l.line);
    if (batch.length < 5000) break;
    after = batch[batch.length - 1].seq;
  }
  return lines.length ? `${lines.join("\n")}\n` : "";
}

/**
 * The build log line by line as it is written, then the deployment once its build has ended (or nothing
 * more once `signal` is aborted); a 404 when the app has no such deployment.
 */
export async function followBuildLog(
  db: Kysely<Database>,
  options: { ref: DeploymentRef; signal: AbortSignal },
): Promise<AsyncIterable<{ line: string } | { end: DeploymentView }>> {
  const { ref, signal } = options;
  await deploymentRow(db, ref);
  return (async function*() {
    let after = 0;
    while (!signal.aborted) {
      const current = await deploymentRow(db, ref);
      const batch = await selectLogLines(db, { deploymentId: ref.deploymentId, afterSeq: after, limit: 1000 });
      for (const l of batch) yield { line: l.line };
      if (batch.length) after = batch[batch.length - 1].seq;
      // The status was read before the lines: once terminal, every line was written already.
      if (isTerminal(current.status) && batch.length < 1000) {
        yield { end: deploymentView(current, await activeIdOf(db, ref)) };
        return;
      }
      if (batch.length < 1000) await new Promise((resolve) => setTimeout(resolve, 200));
    }
  })();
}
