// DOM helpers: every node the page makes comes through here, built with createElement and textContent only.
// Untrusted text (anything an agent, a tool or a bridge produced) is only ever a text node: nothing here parses
// markup, and the page uses none of the DOM's HTML-parsing setters or writers anywhere (tests/test_page_serving.py greps).

/** An element: `attrs` are set with setAttribute (`class`, `data-*`, `aria-*` …; `hidden`/`disabled` when true),
 *  `on*` functions become listeners; children are nodes or strings (strings become text nodes). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "value") {
      el.value = value;
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

/** Append children (nodes, strings, arrays of them; null and undefined skipped). */
export function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** A duration in seconds as a person reads it: 4s, 3m 12s, 2h 5m. */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

/** Any JSON value as indented text (for arguments, results and payloads shown as they are). */
export function pretty(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** A value of the wire that should be a string, as one (an agent's field may be anything). */
export function str(value) {
  return value === null || value === undefined ? "" : typeof value === "string" ? value : pretty(value);
}
