/**
 * The shared test client: openapi-fetch over the generated `paths`, with a middleware that checks
 * every response against the contract (a mismatch fails the test).
 */
import createClient, { type Client, type Middleware } from "openapi-fetch";
import type { paths } from "../../generated/api.d.ts";
import { assertMatchesContract } from "./contract.ts";

/** A typed client whose every response has been checked against the contract. */
export type TestClient = Client<paths>;

const contractCheck: Middleware = {
  async onResponse({ request, response }) {
    await assertMatchesContract(request.method, request.url, response);
    return undefined;
  },
};

/** Creates the validating client for `baseUrl`, sending `token` as a bearer token when given. */
export function createTestClient(baseUrl: string, token?: string): TestClient {
  const client = createClient<paths>({
    baseUrl,
    headers: token ? { Authorization: `Bearer ${token}` } : {},
  });
  client.use(contractCheck);
  return client;
}
