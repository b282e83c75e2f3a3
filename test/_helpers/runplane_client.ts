/**
 * The package's own client (`client/mod.ts`) for tests, with a `fetch` that checks every response
 * against the contract before the client sees it.
 */
import { createRunplaneClient, type RunplaneClient } from "../../client/mod.ts";
import { assertMatchesContract } from "./contract.ts";

/** `fetch` for `createRunplaneClient` that checks each answer against the contract. */
export async function contractCheckedFetch(request: Request): Promise<Response> {
  const response = await fetch(request);
  await assertMatchesContract(request.method, request.url, response);
  return response;
}

/** A `RunplaneClient` on `url` (both APIs) whose every answer is checked against the contract. */
export function createCheckedRunplaneClient(url: string, token?: string): RunplaneClient {
  return createRunplaneClient({ baseUrl: url, apiUrl: url, token, fetch: contractCheckedFetch });
}
