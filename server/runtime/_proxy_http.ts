/**
 * Forwards a call of a custom runtime's route by another method than POST (issue 47) as HTTP: the same
 * method, path, query string, headers and body reach the app, and its 2xx answer comes back as it is
 * (status, headers, body streamed as the app writes it). Any other answer is an `upstream_error`, as for
 * a POST. Redirects are the app's answer, never followed.
 */
import { Readable } from "node:stream";
import { request as undiciRequest } from "undici";
import { startDeadline } from "../deadline/mod.ts";
import { RunFailure } from "./_failures.ts";
import { guardedPost } from "./_guarded_fetch.ts";
import type { CallOutcome, HttpCall } from "./_outcome.ts";
import { boundedText, failureFor, type ProxyCall } from "./_proxy.ts";

/** An answer as read: status, headers as name and value, body. */
interface Answer {
  status: number;
  headers: Array<[string, string]>;
  body: AsyncIterable<Uint8Array> & { destroy?(): void; cancel?(): Promise<void> };
}

/** The answer's headers as name and value pairs (a repeated header once per value). */
function headerPairs(headers: Record<string, string | string[] | undefined>): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) pairs.push([name, one]);
  }
  return pairs;
}

/** Sends the call to `url` and resolves with the answer once its headers arrived. */
async function send(url: string, call: ProxyCall, options: { http: HttpCall; signal: AbortSignal }): Promise<Answer> {
  const { http, signal } = options;
  const headers: Record<string, string> = {};
  for (const [name, value] of http.headers) headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
  headers["x-request-id"] = call.runId;
  const body = http.body.length > 0 ? http.body : undefined;
  if (call.guard) {
    const response = await guardedPost(new URL(url), {
      method: http.method,
      headers,
      body: body ?? "",
      signal,
      guard: call.guard,
    });
    const pairs: Array<[string, string]> = [];
    response.headers.forEach((value, name) => pairs.push([name, value]));
    const stream = response.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() });
    return { status: response.status, headers: pairs, body: Readable.fromWeb(stream as never) };
  }
  const answer = await undiciRequest(url, {
    method: http.method as "GET",
    headers,
    body,
    signal,
    dispatcher: call.dispatcher,
  });
  return { status: answer.statusCode, headers: headerPairs(answer.headers), body: answer.body };
}

/** The body's chunks as they come; frees the call once it ends, fails or its reader stops. */
async function* chunks(answer: Answer, options: { fail(error: unknown): RunFailure; done(): void }) {
  try {
    for await (const chunk of answer.body) yield chunk as Uint8Array;
  } catch (error) {
    throw options.fail(error);
  } finally {
    answer.body.destroy?.();
    options.done();
  }
}

/**
 * Sends `call` (its `http` part) to `<baseUrl>/<path>?<query>` with `X-Request-Id` and resolves with the
 * app's 2xx answer, its body read as it comes; anything else is an `upstream_error` with the status and
 * the start of the body. The call is stopped past its grace period (`timeout`) or when its signal aborts.
 */
export async function proxyHttpCall(baseUrl: string, call: ProxyCall): Promise<CallOutcome> {
  const http = call.http!;
  const deadline = startDeadline(call.graceMs, { signal: call.signal });
  const signal = deadline.signal;
  let settled = false;
  const done = () => {
    if (settled) return;
    settled = true;
    deadline.clear();
    call.onSettled();
  };
  try {
    const url = `${baseUrl}/${call.path}${http.query ? `?${http.query}` : ""}`;
    const answer = await send(url, call, { http, signal });
    if (answer.status < 200 || answer.status > 299) {
      const text = (await boundedText(Readable.toWeb(Readable.from(answer.body)) as never, call.runId)).slice(0, 500);
      throw new RunFailure("upstream_error", `The app's server answered ${answer.status}: ${text || "(no body)"}`, {
        runId: call.runId,
      });
    }
    // A reader that never starts (the client left at once) must still free the slot.
    signal.addEventListener("abort", () => {
      answer.body.destroy?.();
      done();
    }, { once: true });
    const body = chunks(answer, { fail: (error) => failureFor(error, call, deadline), done });
    return { kind: "response", status: answer.status, headers: answer.headers, body };
  } catch (error) {
    done();
    throw failureFor(error, call, deadline);
  }
}
