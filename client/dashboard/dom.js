// @ts-check
/**
 * Building the page: elements from tag, attributes and children, where every child that is not a node
 * becomes a text node. Run data is hostile (an app chooses its results, logs and errors), so nothing here
 * ever parses HTML: no `innerHTML`, no `insertAdjacentHTML`.
 */

/** @typedef {import("./types.js").Child} Child */

/**
 * Appends `children` (nested arrays flattened, empty values skipped) to `parent` as nodes or text.
 *
 * @param {Element} parent
 * @param {Child[]} children
 */
function appendAll(parent, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) appendAll(parent, child);
    else parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/**
 * An element with attributes and children. An attribute named `on…` with a function becomes a listener;
 * `true` sets an empty attribute and `false`, null or undefined leave it out.
 *
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, unknown>} [attrs]
 * @param {...Child} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), /** @type {EventListener} */ (value));
    } else if (key === "class") el.className = String(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  appendAll(el, children);
  return el;
}

/**
 * Replaces the children of `parent` with `children`, as `h` would add them.
 *
 * @param {Element} parent
 * @param {...Child} children
 */
export function replace(parent, ...children) {
  parent.replaceChildren();
  appendAll(parent, children);
}

/**
 * An element of the page by id, which the page's HTML or its render made.
 *
 * @param {string} id
 * @returns {HTMLElement}
 */
export function byId(id) {
  const el = document.getElementById(id);
  if (!el) throw new Error(`The page has no #${id}`);
  return el;
}

/**
 * An alert box with an error's message.
 *
 * @param {unknown} error
 */
export function errorBox(error) {
  return h("p", { class: "error", role: "alert" }, error instanceof Error ? error.message : String(error));
}

/**
 * A run's, app's or deployment's status as a coloured badge.
 *
 * @param {string} status
 */
export function badge(status) {
  return h("span", { class: `badge s-${status}` }, status);
}

/**
 * A button that copies `text` to the clipboard and says so.
 *
 * @param {string} text
 * @param {{ label: string; caption?: string; id?: string }} options `label` names it for assistive technology
 */
export function copyButton(text, options) {
  return h("button", {
    type: "button",
    class: "secondary",
    id: options.id,
    "aria-label": options.label,
    /** @param {MouseEvent} event */
    onclick: async (event) => {
      const button = /** @type {HTMLButtonElement} */ (event.currentTarget);
      const copied = await navigator.clipboard?.writeText(text).then(() => true, () => false);
      button.textContent = copied ? "Copied" : "Copy failed: select the text";
    },
  }, options.caption ?? "Copy");
}

/**
 * JSON, pretty-printed; a long value folded behind a disclosure.
 *
 * @param {unknown} value
 * @param {{ id?: string }} [options] `id`: the block's
 */
export function jsonBlock(value, options = {}) {
  const text = JSON.stringify(value, null, 2) ?? "null";
  const pre = h("pre", { class: "mono", id: options.id }, text);
  if (text.length < 2000) return pre;
  return h(
    "details",
    {},
    h("summary", {}, `Show ${text.length.toLocaleString()} character${text.length === 1 ? "" : "s"}`),
    pre,
  );
}

/**
 * A table cell with its column's name, which the phone layout shows beside the value.
 *
 * @param {string} label
 * @param {Child} content
 * @param {Record<string, unknown>} [attrs]
 */
export function cell(label, content, attrs = {}) {
  return h("td", { "data-label": label, ...attrs }, content);
}

/**
 * A table with a header row: `columns` name the columns (an empty name for a column of buttons).
 *
 * @param {string[]} columns
 * @param {Child[]} rows
 * @param {{ id?: string; bodyId?: string; caption?: string; className?: string }} [options]
 */
export function table(columns, rows, options = {}) {
  return h(
    "table",
    { id: options.id, class: options.className },
    options.caption ? h("caption", { class: "muted" }, options.caption) : null,
    h("thead", {}, h("tr", {}, columns.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", { id: options.bodyId }, rows),
  );
}
