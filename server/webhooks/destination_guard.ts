/**
 * The webhook destination guard: only `http`/`https`, and never an address that is loopback, private,
 * link-local (cloud metadata lives there), CGNAT, multicast, unspecified or otherwise not global unicast.
 * A URL naming such an address literally is refused at submit; a name that resolves to one is refused at
 * delivery, and the connection then goes to the very address that was checked.
 */
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import ipaddr from "ipaddr.js";

/** Why a destination was refused. */
export class DestinationRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DestinationRefusedError";
  }
}

const METADATA_ADDRESSES = new Set(["169.254.169.254", "fd00:ec2::254", "100.100.100.200"]);

/**
 * The reason `address` (an IP literal, without brackets) must not be a webhook destination, or null when
 * it is a global unicast address. IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
 */
export function forbiddenAddressReason(address: string): string | null {
  if (!ipaddr.isValid(address)) return "is not an IP address";
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === "ipv6" && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
    parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  }
  if (METADATA_ADDRESSES.has(parsed.toString())) return "is a cloud metadata address";
  const range = parsed.range();
  return range === "unicast" ? null : `is a ${range} address`;
}

/** Options of the guard's checks. */
export interface GuardOptions {
  /** `RUNPLANE_WEBHOOK_ALLOW_PRIVATE`: skip the address checks (the scheme is still checked). */
  allowPrivate: boolean;
}

function hostOf(url: URL): string {
  return url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
}

/**
 * Checks a webhook endpoint at submit time; returns the normalised URL. Throws a
 * `DestinationRefusedError` whose message says what was wrong when the URL is malformed, is not
 * http(s), or names a forbidden address literally. Host names are checked at delivery.
 */
export function checkEndpointUrl(raw: string, options: GuardOptions): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new DestinationRefusedError("webhookEndpoint is not a valid URL; pass an absolute http(s) URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new DestinationRefusedError(`webhookEndpoint must use http or https, not ${url.protocol.slice(0, -1)}`);
  }
  const host = hostOf(url);
  if (!host) throw new DestinationRefusedError("webhookEndpoint has no host; pass an absolute http(s) URL");
  if (!options.allowPrivate && isIP(host)) {
    const reason = forbiddenAddressReason(host);
    if (reason) {
      throw new DestinationRefusedError(
        `webhookEndpoint ${host} ${reason}; use a public address (RUNPLANE_WEBHOOK_ALLOW_PRIVATE=1 lifts this for local development)`,
      );
    }
  }
  return url;
}

/** The address a delivery connects to. */
export interface ResolvedDestination {
  address: string;
  family: 4 | 6;
}

function checkAddresses(host: string, addresses: ReadonlyArray<{ address: string }>, options: GuardOptions): void {
  if (options.allowPrivate) return;
  for (const { address } of addresses) {
    const reason = forbiddenAddressReason(address);
    if (reason) {
      throw new DestinationRefusedError(`destination refused: ${host} resolves to ${address}, which ${reason}`);
    }
  }
}

/**
 * The destination of a URL whose host is an IP literal, checked (throws `DestinationRefusedError`), or
 * null when the host is a name to resolve: no DNS and no promise on a delivery's hot path.
 */
export function literalDestination(url: URL, options: GuardOptions): ResolvedDestination | null {
  const host = hostOf(url);
  const family = isIP(host);
  if (!family) return null;
  checkAddresses(host, [{ address: host }], options);
  return { address: host, family: family === 6 ? 6 : 4 };
}

/**
 * Resolves `url`'s host and checks every address it has; throws `DestinationRefusedError` when any is
 * forbidden (a name must not mix public and private addresses). The caller connects to the returned
 * address only, so a second DNS answer cannot swap the destination.
 */
export async function resolveDestination(url: URL, options: GuardOptions): Promise<ResolvedDestination> {
  const literal = literalDestination(url, options);
  if (literal) return literal;
  const host = hostOf(url);
  const addresses = await lookup(host, { all: true, verbatim: true });
  if (addresses.length === 0) throw new Error(`${host} has no address`);
  checkAddresses(host, addresses, options);
  const first = addresses[0];
  return { address: first.address, family: first.family === 6 ? 6 : 4 };
}
