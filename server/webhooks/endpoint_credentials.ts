/**
 * User information in a webhook endpoint (`https://user:pass@host/hook`): taken out of the URL before it
 * is stored or shown, sealed like the secret, and sent as HTTP Basic authentication, as the URL implies.
 */

function decoded(component: string): string {
  try {
    return decodeURIComponent(component);
  } catch {
    // Not valid percent-encoding: the URL parser kept it as written, so send it as written.
    return component;
  }
}

/**
 * Removes the user name and password from `url` (in place) and returns them as `user:password`,
 * percent-decoded, or null when the URL had none.
 */
export function takeEndpointCredentials(url: URL): string | null {
  if (url.username === "" && url.password === "") return null;
  const credentials = `${decoded(url.username)}:${decoded(url.password)}`;
  url.username = "";
  url.password = "";
  return credentials;
}

/** The `Authorization` header value for `user:password` credentials. */
export function basicAuthorization(credentials: string): string {
  return `Basic ${Buffer.from(credentials, "utf8").toString("base64")}`;
}
