// @ts-check
/**
 * The triage view's filters: read from the page's address (so a filtered view can be bookmarked and
 * shared), turned into a `listProjectRuns` query, and shown as a form that writes them back.
 */
import { h } from "./dom.js";
import { absoluteTimes, setAbsoluteTimes } from "./format.js";
import { go, link, rerender } from "./navigation.js";

/** @typedef {import("./types.js").RunQuery} RunQuery */
/** @typedef {import("./types.js").RunStatus} RunStatus */
/** @typedef {import("./types.js").RunMode} RunMode */

/** @type {RunStatus[]} */
export const STATUSES = ["queued", "running", "success", "failure", "cancelled"];
/** @type {RunMode[]} */
export const MODES = ["sync", "async", "stream", "websocket"];
/** Runs per page. */
export const PAGE_SIZE = 50;

/** The time ranges offered, by their name in the address. */
export const RANGES = /** @type {const} */ ({
  "15m": { label: "Last 15 minutes", ms: 15 * 60_000 },
  "1h": { label: "Last hour", ms: 3_600_000 },
  "24h": { label: "Last 24 hours", ms: 86_400_000 },
  "7d": { label: "Last 7 days", ms: 7 * 86_400_000 },
});

/**
 * The filters as the address keeps them; an empty string is no filter. `from` and `to` are the values
 * of `datetime-local` inputs (the viewer's time zone); `since` names one of `RANGES`.
 *
 * @typedef {object} RunFilters
 * @property {string} app
 * @property {string} fn
 * @property {string} status
 * @property {string} mode
 * @property {string} since
 * @property {string} from
 * @property {string} to
 * @property {string} cursor
 */

/** The address's query parameter of each filter. */
const PARAMS = /** @type {const} */ ({
  app: "app",
  fn: "function",
  status: "status",
  mode: "mode",
  since: "since",
  from: "from",
  to: "to",
  cursor: "cursor",
});

/**
 * The filters of an address's query.
 *
 * @param {URLSearchParams} params
 * @returns {RunFilters}
 */
export function readFilters(params) {
  /** @param {keyof typeof PARAMS} key */
  const read = (key) => params.get(PARAMS[key]) ?? "";
  return {
    app: read("app"),
    fn: read("fn"),
    status: read("status"),
    mode: read("mode"),
    since: read("since"),
    from: read("from"),
    to: read("to"),
    cursor: read("cursor"),
  };
}

/**
 * The path of the runs view with `filters`, changed by `changes` (an empty value removes a filter).
 *
 * @param {RunFilters} filters
 * @param {Partial<RunFilters>} [changes]
 */
export function filtersPath(filters, changes = {}) {
  const next = { ...filters, ...changes };
  const query = new URLSearchParams();
  for (const [key, name] of Object.entries(PARAMS)) {
    const value = next[/** @type {keyof RunFilters} */ (key)];
    if (value) query.set(name, value);
  }
  const text = query.toString();
  return `/runs${text ? `?${text}` : ""}`;
}

/**
 * A `datetime-local` value as an instant (ISO 8601, UTC), or undefined when it is not a time.
 *
 * @param {string} value
 */
function instant(value) {
  if (!value) return undefined;
  const at = new Date(value);
  return Number.isNaN(at.getTime()) ? undefined : at.toISOString();
}

/**
 * The `listProjectRuns` query of `filters` at `now`. A status or mode the contract does not know is left
 * out rather than sent (an address can hold anything).
 *
 * @param {RunFilters} filters
 * @param {number} now Unix ms, for a `since` range
 * @returns {RunQuery}
 */
export function listQuery(filters, now) {
  /** @type {RunQuery} */
  const query = { limit: PAGE_SIZE };
  if (filters.app) query.app_id = filters.app;
  if (filters.fn) query.function_name = filters.fn;
  const status = STATUSES.find((s) => s === filters.status);
  if (status) query.status = status;
  const mode = MODES.find((m) => m === filters.mode);
  if (mode) query.mode = mode;
  const range = Object.hasOwn(RANGES, filters.since)
    ? RANGES[/** @type {keyof typeof RANGES} */ (filters.since)]
    : null;
  const after = instant(filters.from) ?? (range ? new Date(now - range.ms).toISOString() : undefined);
  if (after) query.created_after = after;
  const before = instant(filters.to);
  if (before) query.created_before = before;
  if (filters.cursor) query.cursor = filters.cursor;
  return query;
}

/**
 * A `<select>` of `options` (value and label), with `selected` chosen.
 *
 * @param {{ name: string; label: string; selected: string; options: Array<[string, string]> }} spec
 */
function select(spec) {
  return h(
    "label",
    {},
    spec.label,
    h(
      "select",
      { name: spec.name },
      spec.options.map(([value, text]) => h("option", { value, selected: value === spec.selected }, text)),
    ),
  );
}

/**
 * The filter form: app, function, status, mode, a time range (a recent range, or from and to), and
 * whether times read absolute. Submitting goes to the filtered view's first page.
 *
 * @param {RunFilters} filters
 * @param {{ apps: string[] }} options
 */
export function filterForm(filters, options) {
  const absolute = h("input", { type: "checkbox", id: "absolute-times", checked: absoluteTimes() });
  absolute.addEventListener("change", () => {
    setAbsoluteTimes(absolute.checked);
    void rerender();
  });
  return h(
    "form",
    {
      class: "filters",
      id: "filters",
      role: "search",
      /** @param {SubmitEvent} event */
      onsubmit: (event) => {
        event.preventDefault();
        const form = new FormData(/** @type {HTMLFormElement} */ (event.currentTarget));
        /** @param {string} name */
        const value = (name) => String(form.get(name) ?? "").trim();
        go(`/dashboard${
          filtersPath(filters, {
            app: value("app"),
            fn: value("function"),
            status: value("status"),
            mode: value("mode"),
            since: value("since"),
            from: value("from"),
            to: value("to"),
            cursor: "",
          })
        }`);
      },
    },
    select({
      name: "app",
      label: "App",
      selected: filters.app,
      options: [["", "All apps"], ...options.apps.map((a) => /** @type {[string, string]} */ ([a, a]))],
    }),
    h(
      "label",
      {},
      "Function",
      h("input", {
        name: "function",
        value: filters.fn,
        placeholder: "any",
        size: 12,
        pattern: "[A-Za-z_][A-Za-z0-9_.\\-]{0,127}",
        title: "A function's name, e.g. run",
        autocomplete: "off",
        spellcheck: "false",
      }),
    ),
    select({
      name: "status",
      label: "Status",
      selected: filters.status,
      options: [["", "Any"], ...STATUSES.map((s) => /** @type {[string, string]} */ ([s, s]))],
    }),
    select({
      name: "mode",
      label: "Mode",
      selected: filters.mode,
      options: [["", "Any"], ...MODES.map((m) => /** @type {[string, string]} */ ([m, m]))],
    }),
    select({
      name: "since",
      label: "Created",
      selected: filters.since,
      options: [
        ["", "Any time"],
        ...Object.entries(RANGES).map(([key, range]) => /** @type {[string, string]} */ ([key, range.label])),
      ],
    }),
    h("label", {}, "From", h("input", { type: "datetime-local", name: "from", value: filters.from, step: 1 })),
    h("label", {}, "To", h("input", { type: "datetime-local", name: "to", value: filters.to, step: 1 })),
    h("button", { type: "submit" }, "Filter"),
    link("/runs", "Clear", { class: "clear" }),
    h("label", { class: "inline" }, absolute, "Absolute times"),
  );
}

/**
 * Links that filter by status (the current one marked), keeping the other filters.
 *
 * @param {RunFilters} filters
 */
export function statusLinks(filters) {
  return h(
    "div",
    { class: "counts", role: "group", "aria-label": "Filter by status" },
    link(filtersPath(filters, { status: "", cursor: "" }), "All", {
      "aria-current": filters.status === "" ? "true" : "false",
    }),
    STATUSES.map((s) =>
      link(filtersPath(filters, { status: s, cursor: "" }), s, {
        "aria-current": filters.status === s ? "true" : "false",
      })
    ),
  );
}
