// A small Markdown renderer for agent text, safe by construction: it builds DOM nodes (createElement and text
// nodes) and never parses HTML. A raw `<img onerror=…>` in the source is text. Links become anchors only for
// http:, https: and mailto: targets (opened with rel="noopener noreferrer" in a new tab); any other target (a
// `javascript:` link) stays as its text. Supported: paragraphs, ATX headings, fenced and indented code, block
// quotes, ordered and unordered lists (one level, with continuation lines), horizontal rules, and inline code,
// strong, emphasis, strikethrough, links and autolinks.

import { h } from "./dom.js";

const SAFE_SCHEMES = new Set(["http:", "https:", "mailto:"]);

/** The href a link may carry, or null: an absolute http(s) or mailto URL, nothing relative, nothing else. */
export function safeHref(target) {
  const trimmed = String(target).trim();
  if (!/^(https?:\/\/|mailto:)/i.test(trimmed)) return null;
  try {
    const url = new URL(trimmed);
    return SAFE_SCHEMES.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

/** `source` rendered into a fragment of block elements. */
export function renderMarkdown(source) {
  const fragment = document.createDocumentFragment();
  const lines = String(source).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s{0,3}(`{3,}|~{3,})\s*([^`\s]*)/.exec(line);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence[1])) body.push(lines[i++]);
      i += 1; // the closing fence (or the end)
      const code = h("code", fence[2] ? { "data-lang": fence[2] } : {}, body.join("\n"));
      fragment.append(h("pre", { class: "code" }, code));
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const heading = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) {
      fragment.append(h(`h${Math.min(6, heading[1].length + 2)}`, {}, inline(heading[2])));
      i += 1;
      continue;
    }
    if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {
      fragment.append(h("hr"));
      i += 1;
      continue;
    }
    if (/^ {4}|^\t/.test(line)) {
      const body = [];
      while (i < lines.length && (/^ {4}|^\t/.test(lines[i]) || !lines[i].trim())) {
        body.push(lines[i].replace(/^ {4}|^\t/, ""));
        i += 1;
      }
      while (body.length && !body[body.length - 1].trim()) body.pop();
      fragment.append(h("pre", { class: "code" }, h("code", {}, body.join("\n"))));
      continue;
    }
    if (/^\s{0,3}>/.test(line)) {
      const body = [];
      while (i < lines.length && /^\s{0,3}>/.test(lines[i])) body.push(lines[i++].replace(/^\s{0,3}> ?/, ""));
      const quote = h("blockquote");
      quote.append(renderMarkdown(body.join("\n")));
      fragment.append(quote);
      continue;
    }
    const item = listItem(line);
    if (item) {
      const list = h(item.ordered ? "ol" : "ul");
      if (item.ordered && item.start !== 1) list.setAttribute("start", String(item.start));
      while (i < lines.length) {
        const next = listItem(lines[i]);
        if (!next || next.ordered !== item.ordered) break;
        const text = [next.text];
        i += 1;
        while (i < lines.length && lines[i].trim() && !listItem(lines[i]) && /^\s+/.test(lines[i])) {
          text.push(lines[i++].trim());
        }
        list.append(h("li", {}, inline(text.join("\n"))));
      }
      fragment.append(list);
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !startsBlock(lines[i])) para.push(lines[i++]);
    if (!para.length) para.push(lines[i++]); // a line that looked like a block start but was not one
    fragment.append(h("p", {}, inline(para.join("\n"))));
  }
  return fragment;
}

function listItem(line) {
  const bullet = /^\s{0,3}[-*+]\s+(.*)$/.exec(line);
  if (bullet) return { ordered: false, text: bullet[1] };
  const number = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/.exec(line);
  if (number) return { ordered: true, start: Number(number[1]), text: number[2] };
  return null;
}

function startsBlock(line) {
  return /^\s{0,3}(`{3,}|~{3,}|#{1,6}\s|>)/.test(line) || listItem(line) !== null;
}

// Inline spans, in order of precedence: code, autolinks, links, strong, strikethrough, emphasis.
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|<((?:https?:\/\/|mailto:)[^\s<>]+)>|\[([^\]\n]*)\]\(\s*<?([^\s)>]*)>?(?:\s+"[^"]*")?\s*\)|\*\*([^*\n]+?)\*\*|__([^_\n]+?)__|~~([^~\n]+?)~~|\*([^*\s][^*\n]*?)\*|(?<![\w])_([^_\s][^_\n]*?)_(?![\w])|(https?:\/\/[^\s<>()]*[^\s<>().,;:!?'"\]])/g;

/** Inline Markdown as an array of nodes. */
export function inline(text) {
  const nodes = [];
  let last = 0;
  for (const match of text.matchAll(INLINE)) {
    if (match.index > last) nodes.push(...breaks(text.slice(last, match.index)));
    nodes.push(span(match));
    last = match.index + match[0].length;
  }
  if (last < text.length) nodes.push(...breaks(text.slice(last)));
  return nodes;
}

function span(match) {
  const [whole, , code, auto, label, target, strong, strong2, strike, em, em2, bare] = match;
  if (code !== undefined) return h("code", {}, code.replace(/^ (.*) $/, "$1"));
  if (auto !== undefined) return link(auto, [auto], whole);
  if (label !== undefined) return link(target, inline(label), whole);
  if (strong !== undefined || strong2 !== undefined) return h("strong", {}, inline(strong ?? strong2));
  if (strike !== undefined) return h("del", {}, inline(strike));
  if (em !== undefined || em2 !== undefined) return h("em", {}, inline(em ?? em2));
  return link(bare, [bare], whole);
}

function link(target, children, source) {
  const href = safeHref(target);
  if (href === null) return document.createTextNode(source); // not a link we follow: the text as written
  return h("a", { href, rel: "noopener noreferrer", target: "_blank" }, children);
}

function breaks(text) {
  const nodes = [];
  text.split("\n").forEach((part, index) => {
    if (index > 0) nodes.push(h("br"));
    if (part) nodes.push(document.createTextNode(part));
  });
  return nodes;
}
