// @ts-check
/**
 * "Copy as curl": the command that calls a run's function again the way it was called, for a terminal.
 * The token is never in it: the command reads `$RUNPLANE_TOKEN` from the shell (as the CLI does), so a
 * command pasted into a ticket or a chat gives nothing away. Everything else is quoted as one shell word.
 */

/**
 * `text` as one shell word: single-quoted, each `'` written as `'\''` (nothing inside is expanded).
 *
 * @param {string} text
 */
export function shellQuote(text) {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

/**
 * The curl command that calls `run`'s function again with its mode (`?async=true`, or the event stream),
 * its webhook endpoint and its input: an async run's stored input; a sync or stream call's input is not
 * kept, so its command sends `{}` to fill in.
 *
 * @param {import("./types.js").Run} run
 * @param {{ baseUrl: string }} options `baseUrl`: the run API's address
 */
export function curlCommand(run, options) {
  const path = [run.project_id, run.app_id, run.function_name].map(encodeURIComponent).join("/");
  const url = new URL(`/v4/${path}`, options.baseUrl);
  if (run.mode === "async") url.searchParams.set("async", "true");
  if (run.webhook) url.searchParams.set("webhookEndpoint", run.webhook.endpoint);
  const parts = [
    `curl${run.mode === "stream" ? " -N" : ""} -X POST ${shellQuote(url.href)}`,
    `-H "Authorization: Bearer $RUNPLANE_TOKEN"`,
    `-H 'Content-Type: application/json'`,
  ];
  if (run.mode === "stream") parts.push(`-H 'Accept: text/event-stream'`);
  parts.push(`-d ${shellQuote(run.input === null || run.input === undefined ? "{}" : JSON.stringify(run.input))}`);
  return parts.join(" \\\n  ");
}
