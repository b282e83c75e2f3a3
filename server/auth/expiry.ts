const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/**
 * Parses a token expiry: a duration (`30d`, `12h`, `90m`, `2w`) from `now`, or an ISO 8601 date or
 * date-time. Throws when it is malformed or not in the future.
 */
export function parseExpiry(text: string, now = Date.now()): number {
  const duration = /^(\d{1,6})([smhdw])$/.exec(text.trim());
  let at: number;
  if (duration) {
    at = now + Number(duration[1]) * UNITS[duration[2]];
  } else if (/^\d{4}-\d{2}-\d{2}([T ][0-9:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(text.trim())) {
    at = Date.parse(text.trim());
  } else {
    at = Number.NaN;
  }
  if (!Number.isFinite(at)) {
    throw new Error(
      `Invalid expiry "${text}": use a duration such as 30d, 12h, 90m, or an ISO date such as 2027-01-31`,
    );
  }
  if (at <= now) throw new Error(`Expiry "${text}" is in the past: choose a later date`);
  return at;
}
