// @ts-check
/**
 * An app's activity and log tail on its page: calls per bucket by outcome, p50/p95 run time, cold starts
 * and replicas over the last hour or day (`getAppStats`, drawn with uPlot and read again every few
 * seconds while the page is open), and every run's log lines as they are written (`getAppLogs` followed
 * as server-sent events, authenticated by the session cookie).
 */
import uPlot from "uplot";
import { api, call } from "./api.js";
import { h, replace } from "./dom.js";
import { link, runPath } from "./navigation.js";

/** @typedef {import("./types.js").Paths} Paths */
/** @typedef {Paths["/v3/projects/{project_id}/apps/{app_id}/stats"]["get"]["responses"][200]["content"]["application/json"]} AppStats */
/** @typedef {{ run_id: string; at: string; stream: "stdout" | "stderr"; text: string }} AppLogLine */
/** @typedef {{ project_id: string; app_id: string }} AppPath */

/** The section's styles and uPlot's, added to the page once (the page's CSP allows its own stylesheets). */
function addStyles() {
  for (const href of ["/dashboard/assets/vendor/uplot.css", "/dashboard/assets/app_insights.css"]) {
    if (document.querySelector(`link[href="${href}"]`)) continue;
    document.head.append(h("link", { rel: "stylesheet", href }));
  }
}

/** How often the charts are read again while the page shows them. */
const REFRESH_MS = 5_000;
/** The most lines the tail keeps on the page. */
const TAIL_LINES = 500;

/** What the section shown now holds open: closed when another section replaces it or it leaves the page. */
/** @type {{ timer: ReturnType<typeof setInterval>; source: EventSource } | null} */
let open = null;

function closeOpen() {
  if (!open) return;
  clearInterval(open.timer);
  open.source.close();
  open = null;
}

/**
 * The series of each chart: its title, and per series its label, colour, the height it is drawn at and
 * the value its legend shows. The calls' bars are stacked by hand: each outcome's bar is drawn from zero
 * to its own count plus those drawn after it, so the shorter ones painted over it leave its share seen.
 *
 * @typedef {AppStats["buckets"][number]} Bucket
 * @type {Array<{ id: string; title: string; bars?: boolean; series: Array<{ label: string; stroke: string; value: (b: Bucket) => number | null; shown?: (b: Bucket) => number }> }>}
 */
const CHARTS = [
  {
    id: "chart-calls",
    title: "Calls by outcome",
    bars: true,
    series: [
      {
        label: "success",
        stroke: "#1a7f37",
        value: (b) => b.success + b.failure + b.cancelled,
        shown: (b) => b.success,
      },
      { label: "failure", stroke: "#cf222e", value: (b) => b.failure + b.cancelled, shown: (b) => b.failure },
      { label: "cancelled", stroke: "#9a6700", value: (b) => b.cancelled },
    ],
  },
  {
    id: "chart-latency",
    title: "Run time (ms)",
    series: [
      { label: "p50", stroke: "#2456c4", value: (b) => b.p50_ms },
      { label: "p95", stroke: "#8250df", value: (b) => b.p95_ms },
    ],
  },
  {
    id: "chart-cold-starts",
    title: "Cold starts",
    bars: true,
    series: [{ label: "replicas started", stroke: "#bc4c00", value: (b) => b.cold_starts }],
  },
  {
    id: "chart-replicas",
    title: "Replicas",
    series: [{ label: "most at once", stroke: "#0969da", value: (b) => b.replicas }],
  },
];

/**
 * uPlot's data for `chart`: the buckets' middles (seconds), then one array per series.
 *
 * @param {AppStats} stats
 * @param {typeof CHARTS[number]} chart
 * @returns {uPlot.AlignedData}
 */
function chartData(stats, chart) {
  const half = stats.bucket_seconds / 2;
  const xs = stats.buckets.map((b) => Date.parse(b.start) / 1000 + half);
  return [xs, ...chart.series.map((s) => stats.buckets.map((b) => s.value(b)))];
}

/**
 * Draws `chart` into `box`, sized to it; its legend shows the bucket under the cursor (`stats()` is the
 * newest read).
 *
 * @param {HTMLElement} box
 * @param {typeof CHARTS[number]} chart
 * @param {() => AppStats} stats
 */
function drawChart(box, chart, stats) {
  const bars = chart.bars ? uPlot.paths.bars?.({ size: [0.85, 24] }) : undefined;
  const first = stats();
  const from = Date.parse(first.buckets[0].start) / 1000;
  const to = from + first.buckets.length * first.bucket_seconds;
  /** @type {uPlot.Options} */
  const options = {
    title: chart.title,
    width: Math.max(280, Math.floor(box.clientWidth || 560)),
    height: 170,
    cursor: { drag: { x: false, y: false } },
    scales: {
      x: { time: true, range: () => [from, to] },
      y: { range: (_u, min, max) => [Math.min(0, min ?? 0), Math.max(1, Math.ceil((max ?? 1) * 1.1))] },
    },
    series: [
      {},
      ...chart.series.map((s) => ({
        label: s.label,
        stroke: s.stroke,
        fill: chart.bars ? s.stroke : undefined,
        width: chart.bars ? 0 : 2,
        paths: bars,
        spanGaps: false,
        // A bucket between empty ones is a point, not a line: show the points.
        points: { show: !chart.bars, size: 5, fill: s.stroke },
        value: (
          /** @type {uPlot} */ _u,
          /** @type {number | null} */ v,
          /** @type {number} */ _si,
          /** @type {number | null} */ i,
        ) => {
          if (i === null || i === undefined) return "–";
          const bucket = stats().buckets[i];
          const shown = bucket && s.shown ? s.shown(bucket) : v;
          return shown === null || shown === undefined ? "–" : String(Math.round(shown * 10) / 10);
        },
      })),
    ],
  };
  replace(box);
  return new uPlot(options, chartData(first, chart), box);
}

/**
 * The charts of one window, drawn into `boxes` (one per chart), redrawn from fresh stats on `refresh()`.
 *
 * @param {AppPath} path
 * @param {{ boxes: HTMLElement[]; status: HTMLElement; window: () => "1h" | "24h" }} parts
 */
function chartsOf(path, parts) {
  /** @type {uPlot[]} */
  let plots = [];
  let drawnWindow = "";
  /** @type {string | undefined} */
  let drawnStart;
  /** @type {AppStats | undefined} */
  let latest;
  /** @type {ResizeObserver | undefined} */
  let resizer;
  return async function refresh() {
    const window = parts.window();
    const stats = await call(
      api.GET("/v3/projects/{project_id}/apps/{app_id}/stats", { params: { path, query: { window } } }),
    );
    latest = stats;
    const newest = () => latest ?? stats;
    const start = stats.buckets[0]?.start;
    // A new window, or the buckets moved on (a minute passed): draw anew over the new span.
    if (drawnWindow !== window || drawnStart !== start || plots.length === 0) {
      for (const plot of plots) plot.destroy();
      plots = CHARTS.map((chart, i) => drawChart(parts.boxes[i], chart, newest));
      drawnStart = start;
      drawnWindow = window;
      // Each chart takes its box's width, now and whenever the page's width changes.
      resizer?.disconnect();
      const drawn = plots;
      resizer = new ResizeObserver(() => {
        drawn.forEach((plot, i) => {
          const width = Math.floor(parts.boxes[i].clientWidth);
          if (width > 0 && Math.abs(width - plot.width) > 1) plot.setSize({ width, height: plot.height });
        });
      });
      for (const box of parts.boxes) resizer.observe(box);
    } else {
      plots.forEach((plot, i) => plot.setData(chartData(stats, CHARTS[i])));
    }
    const calls = stats.buckets.reduce((n, b) => n + b.success + b.failure + b.cancelled, 0);
    parts.status.textContent = `${calls} call${calls === 1 ? "" : "s"} ended in the last ${
      window === "1h" ? "hour" : "day"
    }, per ${stats.bucket_seconds / 60} min · updated ${new Date().toLocaleTimeString()}`;
  };
}

/**
 * One line of the tail: its time, its run (a link to the run's page) and its text.
 *
 * @param {AppPath} path
 * @param {AppLogLine} line
 */
function tailLine(path, line) {
  return h(
    "div",
    { class: line.stream === "stderr" ? "tail-line err" : "tail-line", "data-run": line.run_id },
    h("span", { class: "muted" }, new Date(line.at).toLocaleTimeString(), " "),
    link(runPath({ run_id: line.run_id, app_id: path.app_id }), line.run_id, { class: "mono" }),
    " ",
    h("span", { class: "mono" }, line.text),
  );
}

/**
 * Follows the app's log into `tail` (the last hour's lines first), keeping the last `TAIL_LINES`.
 *
 * @param {AppPath} path
 * @param {HTMLElement} tail
 */
function followTail(path, tail) {
  const source = new EventSource(
    `/v3/projects/${encodeURIComponent(path.project_id)}/apps/${encodeURIComponent(path.app_id)}/logs`,
  );
  // A reconnect (the browser's, after a dropped connection) replays the last hour: start the view again.
  let opened = false;
  source.addEventListener("open", () => {
    if (opened) tail.replaceChildren();
    opened = true;
  });
  source.addEventListener("message", (event) => {
    const empty = tail.querySelector(".empty");
    if (empty) empty.remove();
    const atBottom = tail.scrollTop + tail.clientHeight >= tail.scrollHeight - 8;
    tail.append(tailLine(path, /** @type {AppLogLine} */ (JSON.parse(event.data))));
    while (tail.childElementCount > TAIL_LINES) tail.firstElementChild?.remove();
    if (atBottom) tail.scrollTop = tail.scrollHeight;
  });
  return source;
}

/**
 * The section: the window's buttons, the four charts and the log tail, live while the page shows them.
 *
 * @param {AppPath} path
 */
export function insightsSection(path) {
  closeOpen();
  addStyles();
  /** @type {"1h" | "24h"} */
  let window = "1h";
  const boxes = CHARTS.map((chart) => h("div", { class: "chart", id: chart.id }));
  const status = h("p", { class: "muted", id: "activity-status" }, "Loading…");
  const refresh = chartsOf(path, { boxes, status, window: () => window });
  const redraw = () => void refresh().catch((error) => (status.textContent = String(error?.message ?? error)));
  /** @param {"1h" | "24h"} to */
  const windowButton = (to) =>
    h("button", {
      type: "button",
      class: "secondary",
      "data-window": to,
      "aria-pressed": String(window === to),
      onclick: (/** @type {MouseEvent} */ event) => {
        window = to;
        for (const b of document.querySelectorAll("[data-window]")) {
          b.setAttribute("aria-pressed", String(b === event.currentTarget));
        }
        redraw();
      },
    }, to === "1h" ? "Last hour" : "Last day");
  const tail = h("div", { class: "tail", id: "app-log", role: "log", "aria-live": "off" }, [
    h("p", { class: "muted empty" }, "No lines in the last hour yet: they appear here as runs write them."),
  ]);
  const section = h(
    "section",
    { id: "activity" },
    h("h2", {}, "Activity"),
    h("div", { class: "actions" }, windowButton("1h"), windowButton("24h")),
    status,
    h("div", { class: "charts" }, boxes),
    h("h2", {}, "Logs"),
    h("p", { class: "muted" }, "Every run's output, as it is written (the last hour first)."),
    tail,
  );
  const source = followTail(path, tail);
  const timer = setInterval(() => {
    if (!section.isConnected) return closeOpen();
    redraw();
  }, REFRESH_MS);
  open = { timer, source };
  // Drawn once the section is in the page, so that the charts take its width.
  requestAnimationFrame(() => redraw());
  return section;
}
