// One timeline item (a canonical item object, assembler.md §3.3) as DOM: built once when the item starts, then
// updated in place as its deltas and its completion arrive. Every field shown is agent or tool output: it goes
// into text nodes, Markdown through renderMarkdown, nothing through HTML.

import { h, pretty, str } from "./dom.js";
import { renderMarkdown } from "./markdown.js";

const STATUS_WORDS = { pending: "running", inProgress: "running", completed: "done", failed: "failed" };

/** The label an item's presentation gives it (pending or completed), or null. */
function presented(item, done) {
  const label = item.presentation?.label;
  if (!label) return null;
  return str(done ? label.completed ?? label.pending : label.pending ?? label.completed);
}

function statusBadge() {
  return h("span", { class: "status" });
}

/** A diff's text as lines marked added, removed or header (a `.diff` block). */
export function diffBlock(text) {
  const pre = h("pre", { class: "diff" });
  for (const line of str(text).split("\n")) {
    const kind = /^(\+\+\+|---)/.test(line)
      ? "header"
      : line.startsWith("+")
        ? "add"
        : line.startsWith("-")
          ? "del"
          : line.startsWith("@@")
            ? "hunk"
            : "context";
    pre.append(h("span", { class: `diff-${kind}` }, line), "\n");
  }
  return pre;
}

/** A new item record: `el` is the timeline element, `update(item)` applies a newer snapshot of the item,
 *  `appendText(kind, delta)` a streamed delta; `dirty` marks Markdown to re-render at the end of a batch. */
export function makeItem(item) {
  const maker = MAKERS[item.type] ?? genericItem;
  const record = maker(item);
  record.el.dataset.itemId = item.id;
  record.el.dataset.itemType = item.type;
  const update = record.update;
  record.update = (next, done) => {
    record.item = { ...record.item, ...next }; // the latest snapshot (a pending card shows a change's diff)
    update(next, done);
  };
  record.update(item, false);
  return record;
}

function textItem(className, title) {
  return (item) => {
    const body = h("div", { class: "markdown" });
    const el = h("div", { class: `item ${className}` }, title ? h("div", { class: "item-title" }, title) : null, body);
    const record = {
      el,
      text: "",
      dirty: false,
      update(next, done) {
        const text = str(next.text);
        if (text && (done || !record.text)) record.text = text;
        record.dirty = true;
      },
      appendText(_kind, delta) {
        record.text += delta;
        record.dirty = true;
      },
      render() {
        body.replaceChildren(renderMarkdown(record.text));
        record.dirty = false;
      },
    };
    return record;
  };
}

function reasoningItem() {
  const summaryText = document.createTextNode("");
  const contentText = document.createTextNode("");
  const body = h("div", { class: "reasoning-text" }, h("div", { class: "reasoning-summary" }, summaryText), contentText);
  const el = h("details", { class: "item reasoning" }, h("summary", {}, "Reasoning"), body);
  return {
    el,
    update(next, done) {
      const summary = (next.summary ?? []).map(str).join("\n");
      const content = (next.content ?? []).map(str).join("\n");
      if (summary && (done || !summaryText.data)) summaryText.data = summary;
      if (content && (done || !contentText.data)) contentText.data = content;
    },
    appendText(kind, delta) {
      (kind === "summary" ? summaryText : contentText).appendData(delta);
    },
  };
}

function commandItem(item) {
  const output = document.createTextNode("");
  const exit = h("span", { class: "exit" });
  const status = statusBadge();
  const el = h(
    "div",
    { class: "item command" },
    h(
      "div",
      { class: "item-title" },
      h("span", { class: "prompt-sign", "aria-hidden": "true" }, "$ "),
      h("code", { class: "command-line" }, str(item.command)),
      " ",
      status,
      exit,
    ),
    item.cwd ? h("div", { class: "cwd" }, `in ${str(item.cwd)}`) : null,
    h("pre", { class: "command-output", "aria-label": "Output" }, output),
  );
  let streamed = false;
  return {
    el,
    update(next, done) {
      setStatus(el, status, next);
      if (next.exitCode !== undefined && next.exitCode !== null) exit.textContent = ` exit ${next.exitCode}`;
      if (next.approvalStatus === "denied") exit.textContent = " denied";
      if (typeof next.aggregatedOutput === "string" && (done || !streamed)) output.data = next.aggregatedOutput;
    },
    appendText(kind, delta) {
      if (kind === "reset") output.data = "";
      streamed = true;
      output.appendData(delta);
    },
  };
}

function fileChangeItem() {
  const status = statusBadge();
  const changes = h("div", { class: "changes" });
  const output = document.createTextNode("");
  const el = h(
    "div",
    { class: "item file-change" },
    h("div", { class: "item-title" }, "File changes ", status),
    changes,
    h("pre", { class: "change-output" }, output),
  );
  return {
    el,
    update(next) {
      setStatus(el, status, next);
      if (!Array.isArray(next.changes)) return;
      changes.replaceChildren(
        ...next.changes.map((change) =>
          h(
            "div",
            { class: "change" },
            h(
              "div",
              { class: "change-path" },
              h("span", { class: "change-kind" }, str(change.kind?.type ?? change.kind)),
              " ",
              h("code", {}, str(change.path)),
              change.movePath ? ` → ${str(change.movePath)}` : null,
            ),
            change.diff ? diffBlock(change.diff) : null,
          ),
        ),
      );
    },
    appendText(_kind, delta) {
      output.appendData(delta);
    },
  };
}

function toolItem(item) {
  const status = statusBadge();
  const progress = h("div", { class: "progress" });
  const args = h("pre", { class: "arguments" });
  const result = h("div", { class: "result" });
  const name = item.server ? `${str(item.server)} · ${str(item.tool)}` : str(item.tool);
  const el = h(
    "div",
    { class: "item tool-call" },
    h("div", { class: "item-title" }, h("span", { class: "tool-name" }, presented(item, false) ?? name), " ", status),
    h("details", { class: "tool-arguments" }, h("summary", {}, "Arguments"), args),
    progress,
    result,
  );
  return {
    el,
    update(next) {
      setStatus(el, status, next);
      if (next.arguments !== undefined) args.textContent = pretty(next.arguments);
      if (next.error !== undefined && next.error !== null) {
        result.replaceChildren(h("pre", { class: "tool-error" }, pretty(next.error)));
      } else if (next.result !== undefined && next.result !== null) {
        result.replaceChildren(h("pre", { class: "tool-result" }, pretty(next.result)));
      }
    },
    appendText(_kind, message) {
      progress.textContent = message;
    },
  };
}

function planStepsItem() {
  const explanation = h("div", { class: "explanation" });
  const steps = h("ol", { class: "steps" });
  const el = h("div", { class: "item plan plan-steps" }, h("div", { class: "item-title" }, "Plan"), explanation, steps);
  return {
    el,
    update(next) {
      explanation.textContent = str(next.explanation);
      steps.replaceChildren(
        ...(next.steps ?? []).map((step) =>
          h("li", { class: "step", "data-status": str(step.status ?? "pending") }, str(step.step)),
        ),
      );
    },
  };
}

function webSearchItem(item) {
  const results = h("pre", { class: "search-result" });
  const title = item.type === "webFetch" ? `Fetch ${str(item.url)}` : "Web search";
  const queries = h("ul", { class: "queries" });
  const el = h(
    "div",
    { class: `item web-search${item.type === "webFetch" ? " web-fetch" : ""}` },
    h("div", { class: "item-title" }, title),
    queries,
    h("details", {}, h("summary", {}, "Results"), results),
  );
  return {
    el,
    update(next) {
      if (Array.isArray(next.queries)) queries.replaceChildren(...next.queries.map((q) => h("li", {}, str(q))));
      else if (next.prompt) queries.replaceChildren(h("li", {}, str(next.prompt)));
      if (next.resultText) results.textContent = str(next.resultText);
    },
  };
}

function genericItem(item) {
  const status = statusBadge();
  const title = h("span", { class: "label" });
  const detail = h("div", { class: "detail" });
  const el = h("div", { class: `item other other-${item.type}` }, h("div", { class: "item-title" }, title, " ", status), detail);
  return {
    el,
    update(next, done) {
      setStatus(el, status, next);
      title.textContent = presented(next, done) ?? describe(next);
      const words = next.summary ?? next.description ?? next.presentation?.detail ?? next.cmd;
      detail.textContent = words ? str(words) : "";
    },
  };
}

function describe(item) {
  const what = { fileRead: "Read", search: "Search", imageView: "Image", contextCompaction: "Context compacted" };
  const detail = item.path ?? item.query ?? item.label ?? item.kind ?? item.taskType ?? "";
  return `${what[item.type] ?? item.type}${detail ? ` ${str(detail)}` : ""}`;
}

function setStatus(el, badge, item) {
  if (item.status === undefined) return;
  el.dataset.status = str(item.status);
  badge.textContent = STATUS_WORDS[item.status] ?? str(item.status);
}

const MAKERS = {
  agentMessage: textItem("assistant-text", null),
  plan: textItem("plan", "Plan"),
  reasoning: reasoningItem,
  commandExecution: commandItem,
  fileChange: fileChangeItem,
  toolCall: toolItem,
  planSteps: planStepsItem,
  webSearch: webSearchItem,
  webFetch: webSearchItem,
};
