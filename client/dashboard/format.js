// @ts-check
/**
 * How values read on the page: times (relative, or absolute on demand), rounded durations, and errors as
 * "Type: message".
 */
import { h } from "./dom.js";

const ABSOLUTE_KEY = "runplane.absoluteTimes";

/** Whether times are shown absolute (in the viewer's time zone) rather than relative; kept per browser. */
export function absoluteTimes() {
  try {
    return localStorage.getItem(ABSOLUTE_KEY) === "1";
  } catch {
    return false;
  }
}

/**
 * Shows times absolute (true) or relative (false) from now on, in this browser.
 *
 * @param {boolean} absolute
 */
export function setAbsoluteTimes(absolute) {
  try {
    if (absolute) localStorage.setItem(ABSOLUTE_KEY, "1");
    else localStorage.removeItem(ABSOLUTE_KEY);
  } catch {
    // Storage refused (a private window's quota): the choice lasts until the page is reloaded.
  }
}

/** @param {number} value */
function twoDigits(value) {
  return String(value).padStart(2, "0");
}

/**
 * A time in the viewer's zone as `2025-06-01 14:03:22`: sortable, and unambiguous in any locale.
 *
 * @param {Date} at
 */
export function absoluteTime(at) {
  return `${at.getFullYear()}-${twoDigits(at.getMonth() + 1)}-${twoDigits(at.getDate())} `
    + `${twoDigits(at.getHours())}:${twoDigits(at.getMinutes())}:${twoDigits(at.getSeconds())}`;
}

/**
 * How long ago (or how far ahead) `at` is from `now`, in words.
 *
 * @param {Date} at
 * @param {number} now
 */
export function relativeTime(at, now) {
  const days = (/** @type {number} */ n) => plural(Math.round(n / 86400), "day");
  const seconds = Math.round((now - at.getTime()) / 1000);
  if (seconds < -5) {
    const ahead = -seconds;
    if (ahead < 3600) return `in ${Math.round(ahead / 60)} min`;
    if (ahead < 86400) return `in ${Math.round(ahead / 3600)} h`;
    return `in ${days(ahead)}`;
  }
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return `${days(seconds)} ago`;
}

/**
 * `count` and `word`, the word in its plural (`many`, default `word + "s"`) unless `count` is exactly 1:
 * `1 attempt`, `2 attempts`, `0.5 cores`.
 *
 * @param {number} count
 * @param {string} word
 * @param {string} [many]
 */
export function plural(count, word, many = `${word}s`) {
  return `${count} ${count === 1 ? word : many}`;
}

/**
 * A `<time>`: relative or absolute as the viewer chose (`absoluteTimes`), the other one, with the UTC
 * time, on hover.
 *
 * @param {string | null | undefined} iso
 */
export function when(iso) {
  if (!iso) return h("span", { class: "muted" }, "–");
  const at = new Date(iso);
  const absolute = absoluteTime(at);
  const relative = relativeTime(at, Date.now());
  const shown = absoluteTimes() ? absolute : relative;
  const other = absoluteTimes() ? relative : absolute;
  return h("time", { datetime: iso, title: `${other} (${at.toISOString()})` }, shown);
}

/**
 * A duration in milliseconds, rounded as people read one: `120 ms`, `5.1 s`, `2 min 5 s`, `3 h 20 min`.
 *
 * @param {number | null | undefined} ms
 */
export function duration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
  if (ms < 1) return ms <= 0 ? "0 ms" : "< 1 ms";
  if (Math.round(ms) < 1000) return `${Math.round(ms)} ms`;
  const tenths = Math.round(ms / 100);
  if (tenths < 600) return `${(tenths / 10).toFixed(1)} s`;
  const seconds = Math.round(ms / 1000);
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  const minutes = Math.round(ms / 60_000);
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/**
 * A run's error as one line, "Type: message", the type said once.
 *
 * @param {import("./types.js").RunError} error
 */
export function errorText(error) {
  return error.message ? `${error.type}: ${error.message}` : error.type;
}
