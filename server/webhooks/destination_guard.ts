/**
 * The webhook destination guard: only `http`/`https`, and never an address that is loopback, private,
 * link-local (cloud metadata lives there), CGNAT, multicast, unspecified or otherwise not global unicast.
 * A URL naming such an address literally is refused at submit; a name that resolves to one is refused at
 * delivery, and the connection then goes to the very address that was checked.
 */
import { lookup } from "node:dns/promises";
import { isIP, type LookupFunction } from "node:net";
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
 * it is a global unicast address. Every notation is judged: an IPv6 address that carries an IPv4 address
 * a router would forward to (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4
 * `2002:aabb:ccdd::`) is judged as that IPv4 address too; any other IPv6 address outside `2000::/3`
 * (IPv4-compatible `::a.b.c.d`, IPv4-translated, local NAT64, discard, …) or in a special range inside it
 * (Teredo, documentation, benchmarking, ORCHID, …) is refused.
 */
export function forbiddenAddressReason(address: string): string | null {
  const family = isIP(address);
  if (family === 0) return "is not an IP address";
  if (address.includes("%")) return "is a scoped (zone) address";
  // ipaddr.js reads any dotted suffix as IPv4-mapped (`::8.8.8.8` becomes `::ffff:8.8.8.8`), so IPv6 text
  // is first put in the WHATWG URL's canonical hex form, the form a connection uses.
  const parsed = ipaddr.parse(family === 6 ? new URL(`http://[${address}]/`).hostname.slice(1, -1) : address);
  if (parsed.kind() === "ipv4") return ipv4Reason(parsed as ipaddr.IPv4);
  const v6 = parsed as ipaddr.IPv6;
  const embedded = embeddedIPv4(v6);
  if (embedded) {
    const reason = ipv4Reason(embedded.address);
    return reason ? `${embedded.notation} ${embedded.address} which ${reason}` : null;
  }
  if (METADATA_ADDRESSES.has(v6.toString())) return "is a cloud metadata address";
  const range = v6.range();
  if (range !== "unicast") return `is a ${range} address`;
  if (!v6.match(GLOBAL_UNICAST_V6)) {
    return v6.match(IPV4_COMPATIBLE) ? "is an IPv4-compatible address (deprecated)" : "is not a global unicast address";
  }
  return null;
}

const GLOBAL_UNICAST_V6 = ipaddr.parseCIDR("2000::/3") as [ipaddr.IPv6, number];
const IPV4_COMPATIBLE = ipaddr.parseCIDR("::/96") as [ipaddr.IPv6, number];
const NAT64_WELL_KNOWN = ipaddr.parseCIDR("64:ff9b::/96") as [ipaddr.IPv6, number];
const SIX_TO_FOUR = ipaddr.parseCIDR("2002::/16") as [ipaddr.IPv6, number];

function ipv4Reason(address: ipaddr.IPv4): string | null {
  if (METADATA_ADDRESSES.has(address.toString())) return "is a cloud metadata address";
  const range = address.range();
  return range === "unicast" ? null : `is a ${range} address`;
}

/** The IPv4 address an IPv6 address delivers to, for the notations a router translates. */
function embeddedIPv4(v6: ipaddr.IPv6): { notation: string; address: ipaddr.IPv4 } | null {
  const [, , , , , , g, h] = v6.parts;
  if (v6.isIPv4MappedAddress()) return { notation: "is IPv4-mapped", address: v6.toIPv4Address() };
  if (v6.match(NAT64_WELL_KNOWN)) return { notation: "is NAT64 for", address: fromWords(g, h) };
  if (v6.match(SIX_TO_FOUR)) return { notation: "is 6to4 for", address: fromWords(v6.parts[1], v6.parts[2]) };
  return null;
}

function fromWords(high: number, low: number): ipaddr.IPv4 {
  return new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);
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

/** A `lookup` for a connection that answers `destination` whatever the name: the address that was checked. */
export function pinnedLookup(destination: ResolvedDestination): LookupFunction {
  return (_hostname, options, callback) => {
    if ((options as { all?: boolean }).all) {
      (callback as unknown as (err: null, addresses: ResolvedDestination[]) => void)(null, [destination]);
    } else {
      callback(null, destination.address, destination.family);
    }
  };
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
