// One thread's timeline: its journal (`thread/events {threadId, afterSeq}`) and then its live events, each seq
// shown once and in order. Entries are queued and rendered in chunks (CHUNK per frame) so a 10,000-event journal
// does not freeze the tab; streamed text grows in place in its item's element (a text node's appendData, or the
// item's Markdown re-rendered once per chunk), never by re-rendering the timeline. A gap in the seqs (a live
// notification ahead of the replay, a reconnect) is filled from the journal before anything after it is shown.

import { h, pretty, str } from "./dom.js";
import { diffBlock, makeItem } from "./items.js";

const CHUNK = 500;
const DELTAS = {
  "item/agentMessage/delta": "text",
  "item/plan/delta": "text",
  "item/reasoning/summaryTextDelta": "summary",
  "item/reasoning/textDelta": "content",
  "item/commandExecution/outputDelta": "output",
  "item/fileChange/outputDelta": "output",
};
// What a streamed delta's item is, when no item/started announced it
const DELTA_ITEM = {
  "item/agentMessage/delta": "agentMessage",
  "item/plan/delta": "plan",
  "item/reasoning/summaryTextDelta": "reasoning",
  "item/reasoning/textDelta": "reasoning",
  "item/commandExecution/outputDelta": "commandExecution",
  "item/fileChange/outputDelta": "fileChange",
  "item/toolCall/progress": "toolCall",
};
const TURN_WORDS = { completed: "Turn completed", interrupted: "Turn interrupted", failed: "Turn failed" };

export class Timeline {
  /** `fetch(threadId, afterSeq)` → the daemon's `thread/events` result; `prompts` maps clientRequestId → text
   *  (what this tab sent: the journal keeps no prompt's text); `onTurn(turnId | null)` says when a turn opens and
   *  settles; `onName(name)` a thread's new name; `onShown()` runs after each chunk is rendered. */
  constructor(root, { fetch, prompts, onTurn, onName, onShown }) {
    this.root = root;
    this.onShown = onShown;
    this.fetchEvents = fetch;
    this.prompts = prompts;
    this.onTurn = onTurn;
    this.onName = onName;
    this.threadId = null;
    this.generation = 0;
    // Whether to keep the newest event in view, from the person's own scrolling: measuring it at each chunk would
    // lay the whole timeline out each time
    root.addEventListener("scroll", () => (this.follow = this.atBottom()), { passive: true });
    this.reset(null);
  }

  reset(threadId) {
    this.threadId = threadId;
    this.generation += 1;
    this.queue = [];
    this.held = [];
    this.queued = 0; // the highest seq queued: resume from here
    this.shown = 0; // the highest seq rendered
    this.filling = false;
    this.scheduled = false;
    this.items = new Map();
    this.dirty = new Set();
    this.turnUsage = null;
    this.turnDiff = null;
    this.openTurn = null;
    this.follow = true;
    this.root.replaceChildren();
    this.root.setAttribute("aria-busy", "false");
  }

  /** Show `threadId` from the start of its journal. */
  async open(threadId) {
    this.reset(threadId);
    await this.fill();
  }

  /** After a reconnect: what the journal has past the last seq queued. */
  async resume() {
    if (this.threadId !== null) await this.fill();
  }

  /** Live entries of this thread (a `thread/events` notification's `events`). */
  accept(entries) {
    if (this.filling) {
      this.held.push(...entries);
      return;
    }
    for (const entry of entries) {
      if (entry.seq <= this.queued) continue;
      if (entry.seq > this.queued + 1) {
        this.held.push(entry);
        this.fill();
        continue;
      }
      this.push(entry);
    }
  }

  async fill() {
    if (this.filling || this.threadId === null) return;
    this.filling = true;
    const generation = this.generation;
    const before = this.queued;
    this.root.setAttribute("aria-live", "off"); // a replay is not news: screen readers hear only live events
    this.root.setAttribute("aria-busy", "true");
    let result = null;
    try {
      result = await this.fetchEvents(this.threadId, this.queued);
    } catch (error) {
      console.warn("bbridge page: reading the journal failed (resumed on the next connection)", error);
    }
    if (generation !== this.generation) return;
    this.filling = false;
    if (result === null) return; // held entries wait for resume() after the reconnect
    if (result.missingThrough && result.missingThrough > this.queued) {
      this.notice(`Events up to ${result.missingThrough} are no longer in the daemon's journal.`, result.missingThrough);
      this.queued = result.missingThrough;
    }
    for (const entry of result.events) if (entry.seq > this.queued) this.push(entry);
    const held = this.held.sort((a, b) => a.seq - b.seq).filter((entry) => entry.seq > this.queued);
    this.held = [];
    if (held.length && held[0].seq > this.queued + 1 && this.queued === before) {
      this.held = held; // the journal has not caught up with them yet: ask again shortly
      setTimeout(() => generation === this.generation && this.fill(), 250);
    } else {
      this.accept(held);
    }
    this.schedule();
  }

  push(entry) {
    this.queue.push(entry);
    this.queued = entry.seq;
    this.schedule();
  }

  schedule() {
    if (this.scheduled || !this.queue.length) {
      if (!this.queue.length && !this.filling) this.settled();
      return;
    }
    this.scheduled = true;
    const run = () => this.pump();
    if (document.hidden) setTimeout(run, 0);
    else requestAnimationFrame(run);
  }

  pump() {
    this.scheduled = false;
    const batch = this.queue.splice(0, CHUNK);
    for (const entry of batch) {
      if (entry.seq <= this.shown) continue;
      this.shown = entry.seq;
      try {
        this.render(entry.seq, entry.event);
      } catch (error) {
        console.warn("bbridge page: an event the page could not show", entry.seq, error);
        this.notice(`Event ${entry.seq} (${str(entry.event?.type)}) could not be shown: ${error.message}`, entry.seq);
      }
    }
    for (const record of this.dirty) record.render();
    this.dirty.clear();
    if (this.follow && !this.queue.length) this.root.scrollTop = this.root.scrollHeight;
    this.onShown();
    this.schedule();
  }

  settled() {
    this.root.setAttribute("aria-busy", "false");
    this.root.setAttribute("aria-live", "polite");
  }

  atBottom() {
    const root = this.root;
    return root.scrollHeight - root.scrollTop - root.clientHeight < 80;
  }

  add(el, seq) {
    el.dataset.seq = String(seq);
    this.root.append(el);
    return el;
  }

  notice(text, seq, className = "notice") {
    return this.add(h("div", { class: className }, text), seq);
  }

  item(seq, item) {
    let record = this.items.get(item.id);
    if (record === undefined) {
      record = makeItem(item);
      this.items.set(item.id, record);
      this.add(record.el, seq);
    }
    return record;
  }

  render(seq, event) {
    const type = event.type;
    if (type in DELTAS) {
      const record = this.item(seq, { id: event.itemId, type: DELTA_ITEM[type], text: "" });
      if (type === "item/commandExecution/outputDelta" && event.reset) record.appendText("reset", "");
      record.appendText(DELTAS[type], str(event.delta));
      if (record.render) this.dirty.add(record);
      return;
    }
    switch (type) {
      case "item/started":
      case "item/completed":
      case "item/backgroundTask/progress":
      case "item/backgroundTask/completed":
      case "item/delegation/progress":
      case "item/delegation/completed": {
        const record = this.item(seq, event.item);
        record.update(event.item, !type.endsWith("started") && !type.endsWith("progress"));
        if (record.render) this.dirty.add(record);
        return;
      }
      case "item/toolCall/progress":
        if (event.message) this.item(seq, { id: event.itemId, type: "toolCall", tool: "" }).appendText("progress", str(event.message));
        return;
      case "turn/started":
        this.turnUsage = this.turnDiff = null;
        this.openTurn = event.scope?.turnId ?? null;
        this.onTurn(this.openTurn);
        this.add(h("div", { class: "turn-start" }, "Turn started"), seq);
        return;
      case "turn/completed": {
        const status = str(event.status);
        const el = h("div", { class: "turn-end", "data-status": status }, TURN_WORDS[status] ?? `Turn ${status}`);
        if (event.error?.message) el.append(h("span", { class: "turn-error" }, `: ${str(event.error.message)}`));
        this.add(el, seq);
        this.openTurn = null;
        this.onTurn(null);
        return;
      }
      case "turn/input/accepted": {
        const text = this.prompts.get(event.clientRequestId);
        const el = h("div", { class: "prompt" }, h("div", { class: "item-title" }, text === undefined ? "Prompt" : "You"));
        el.append(
          text === undefined
            ? h("div", { class: "prompt-unknown" }, "A prompt sent by another client (the journal keeps no prompt text).")
            : h("div", { class: "prompt-text" }, text),
        );
        this.add(el, seq);
        return;
      }
      case "thread/tokenUsage/updated":
        this.usage(seq, event.tokenUsage);
        return;
      case "turn/diff/updated":
        if (this.turnDiff === null) {
          this.turnDiff = this.add(h("details", { class: "turn-diff" }, h("summary", {}, "This turn's changes")), seq);
        }
        this.turnDiff.replaceChildren(this.turnDiff.firstChild, diffBlock(event.diff));
        return;
      case "provider/error":
      case "system/error":
        this.problem(seq, "error", event.message, event.detail, event.willRetry ? "(will retry)" : "");
        return;
      case "provider/warning":
      case "system/warning":
        this.problem(seq, "warning", event.summary ?? event.message ?? event.category, event.details, "");
        return;
      case "provider/modelFallback":
        this.problem(seq, "warning", `Model ${str(event.originalModel)} fell back to ${str(event.fallbackModel)}`, event.message, "");
        return;
      case "provider/unhandled":
        this.add(h("details", { class: "unhandled" }, h("summary", {}, `Unhandled ${str(event.rawType)}`), h("pre", {}, pretty(event.rawEvent))), seq);
        return;
      case "thread/name/updated":
        this.notice(`Named “${str(event.threadName)}”`, seq);
        this.onName(str(event.threadName));
        return;
      case "thread/started":
        this.notice("Thread started", seq);
        return;
      case "thread/compacted":
        this.notice("Context compacted", seq);
        return;
      case "thread/context/cleared":
        this.notice("Context cleared", seq);
        return;
      default:
        return; // identity, rate limits, extension state, context usage: nothing a person reads here
    }
  }

  problem(seq, kind, message, detail, suffix) {
    const el = h("div", { class: kind, role: kind === "error" ? "alert" : null }, h("strong", {}, kind === "error" ? "Error: " : "Warning: "), str(message), suffix ? ` ${suffix}` : "");
    if (detail) el.append(h("pre", { class: "problem-detail" }, pretty(detail)));
    this.add(el, seq);
  }

  usage(seq, usage) {
    const total = usage?.total ?? {};
    const words = [`${total.totalTokens ?? "?"} tokens`, `in ${total.inputTokens ?? "?"}`, `out ${total.outputTokens ?? "?"}`];
    if (total.cachedInputTokens) words.push(`cached ${total.cachedInputTokens}`);
    if (usage?.modelContextWindow) words.push(`window ${usage.modelContextWindow}`);
    const text = `Usage: ${words.join(", ")}`;
    if (this.turnUsage === null) this.turnUsage = this.add(h("div", { class: "usage" }), seq);
    this.turnUsage.dataset.seq = String(seq);
    this.turnUsage.textContent = text;
  }
}
