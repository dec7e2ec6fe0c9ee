// Pending requests of the open thread as cards: approvals (what it asks, one button per decision offered),
// questions (a form), client tool calls (a result to give). Answers go through `interaction/respond`; a
// resolution (by this page, another client or the daemon's policy) marks the card resolved, says who, and the
// card closes a few seconds later or when dismissed.

import { h, pretty, str } from "./dom.js";
import { diffBlock } from "./items.js";
import { renderMarkdown } from "./markdown.js";

export const DECISION_NAMES = { allow_once: "Allow once", allow_for_session: "Allow for session", deny: "Deny" };
const CLOSE_AFTER_MS = 6000;

/** The approval answer a decision stands for (protocol.md §3.7), as `bbridge respond` builds it: an allow grants
 *  what the request offers (a permission grant's permissions; for the session, the subject's `sessionGrant`). */
export function approvalAnswer(payload, decision) {
  if (decision === "deny") return { decision: "deny" };
  const subject = payload.subject ?? {};
  let granted = subject.kind === "permission_grant" ? subject.permissions ?? null : null;
  if (decision === "allow_for_session" && granted === null) granted = subject.sessionGrant ?? null;
  return { decision, grantedPermissions: granted };
}

/** Who resolved a request, in words: `answered by ws-2 (bbridge-page 0.1.0)` or the daemon's policy. */
export function resolvedWords(resolution) {
  const by = str(resolution.resolvedBy);
  let who;
  if (by.startsWith("daemon:")) who = `resolved by the daemon's policy (${by})`;
  else {
    const client = resolution.client;
    who = `answered by ${by}${client ? ` (${str(client.name)} ${str(client.version)})` : ""}`;
  }
  const result = resolution.result;
  let answer = "";
  if (resolution.error) answer = `error: ${str(resolution.error.message)}`;
  else if (result && typeof result === "object") {
    if ("decision" in result) answer = str(result.decision);
    else if ("success" in result) answer = result.success ? "tool succeeded" : "tool failed";
    else if (result.kind === "user_answer") answer = "answered";
  }
  return answer ? `${who}: ${answer}` : who;
}

export class PendingCards {
  /** `respond(requestId, result)` answers; `itemFor(itemId)` is the timeline's latest snapshot of an item;
   *  `onClosed()` moves the focus on when the card that held it closes. */
  constructor(root, { respond, itemFor, onClosed }) {
    this.root = root;
    this.respond = respond;
    this.itemFor = itemFor;
    this.onClosed = onClosed;
    this.cards = new Map();
  }

  clear() {
    this.cards.clear();
    this.root.replaceChildren();
  }

  /** Show `request` (an `interaction/opened` params or a `thread/pending` entry) once. */
  show(request) {
    if (this.cards.has(request.requestId)) return;
    const card = h("section", {
      class: "pending-card",
      "data-request-id": request.requestId,
      "data-kind": str(request.kind),
      "aria-label": `${kindWords(request)} ${request.requestId}`,
    });
    const error = h("p", { class: "card-error", role: "alert", hidden: true });
    card.append(h("h3", {}, kindWords(request)), ...this.body(request, card, error), error);
    this.cards.set(request.requestId, card);
    this.root.append(card);
  }

  /** A resolution: the card says who answered, then closes. */
  resolve(resolution) {
    const card = this.cards.get(resolution.requestId);
    if (card === undefined || card.dataset.resolved === "true") return;
    card.dataset.resolved = "true";
    for (const control of card.querySelectorAll("button, input, textarea, select")) control.disabled = true;
    const close = () => {
      const focused = card.contains(document.activeElement);
      card.remove();
      this.cards.delete(resolution.requestId);
      if (focused) this.onClosed(); // focus goes on, not to the page's body
    };
    const dismiss = h("button", { type: "button", class: "dismiss", onclick: close }, "Dismiss");
    const focused = card.contains(document.activeElement); // this person was answering it: keep them there
    card.append(h("p", { class: "resolved-by", role: "status" }, resolvedWords(resolution)), dismiss);
    if (focused) dismiss.focus({ preventScroll: true });
    setTimeout(close, CLOSE_AFTER_MS);
  }

  /** The files and diffs of a file change's card, once the timeline has its item (it may show after the card). */
  fillChanges(box) {
    if (box.childElementCount) return;
    const item = this.itemFor(box.dataset.itemId);
    for (const change of item?.changes ?? []) {
      box.append(h("div", { class: "ask-file" }, h("code", {}, str(change.path))), change.diff ? diffBlock(change.diff) : "");
    }
  }

  /** The timeline showed more: fill what the cards were waiting for. */
  refresh() {
    for (const box of this.root.querySelectorAll(".ask-changes")) this.fillChanges(box);
  }

  async answer(requestId, result, error) {
    error.hidden = true;
    try {
      await this.respond(requestId, result);
    } catch (failure) {
      error.textContent = `Not answered: ${failure.message}`;
      error.hidden = false;
    }
  }

  body(request, card, error) {
    if (request.method === "item/tool/call") return this.toolCall(request, error);
    const payload = request.params?.payload ?? {};
    if (payload.kind === "approval") return this.approval(request, payload, error);
    if (payload.kind === "user_question") return this.question(request, payload, error);
    return this.raw(request, error);
  }

  approval(request, payload, error) {
    const subject = payload.subject ?? {};
    const parts = [];
    if (subject.kind === "command") {
      parts.push(h("pre", { class: "ask-command" }, h("code", {}, str(subject.command))));
      if (subject.cwd) parts.push(h("p", { class: "ask-cwd" }, `in ${str(subject.cwd)}`));
    } else if (subject.kind === "file_change") {
      parts.push(h("p", { class: "ask-files" }, `Change files in ${str(subject.writeScope ?? "the workspace")}`));
      const changes = h("div", { class: "ask-changes", "data-item-id": str(subject.itemId) });
      parts.push(changes);
      this.fillChanges(changes);
    } else if (subject.kind === "permission_grant") {
      parts.push(h("p", {}, `Grant ${str(subject.toolName ?? "a tool")}:`), h("pre", {}, pretty(subject.permissions)));
    } else if (subject.kind === "plan") {
      parts.push(h("div", { class: "ask-plan markdown" }, renderMarkdown(str(subject.plan))));
    } else if (subject.kind === "tool_use") {
      parts.push(h("p", {}, `Use ${str(subject.tool)}`, subject.presentation?.detail ? `: ${str(subject.presentation.detail)}` : ""));
      const hosted = request.params?.hostedTool; // a tool the daemon hosts: its arguments and the argv it would run
      if (hosted?.argv) parts.push(h("pre", { class: "ask-command" }, h("code", {}, pretty(hosted.argv))));
      if (hosted) parts.push(h("pre", {}, pretty(hosted.arguments)));
    } else {
      parts.push(h("pre", {}, pretty(subject)));
    }
    if (payload.reason) parts.push(h("p", { class: "ask-reason" }, str(payload.reason)));
    const decisions = (payload.availableDecisions ?? []).filter((d) => d in DECISION_NAMES);
    const buttons = decisions.map((decision) =>
      h(
        "button",
        {
          type: "button",
          class: `decision decision-${decision}`,
          onclick: () => this.answer(request.requestId, approvalAnswer(payload, decision), error),
        },
        DECISION_NAMES[decision],
      ),
    );
    parts.push(h("div", { class: "decisions" }, ...buttons));
    return parts;
  }

  question(request, payload, error) {
    const fields = (payload.questions ?? []).map((question, index) => {
      const name = `q${index}`;
      const choices = (question.options ?? []).map((option) =>
        h(
          "label",
          { class: "option" },
          h("input", { type: question.multiSelect ? "checkbox" : "radio", name, value: str(option.value) }),
          ` ${str(option.label || option.value)}`,
          option.description ? h("span", { class: "option-description" }, ` — ${str(option.description)}`) : null,
        ),
      );
      const free = question.allowFreeText
        ? h("label", { class: "free-text" }, "Your answer", h("textarea", { name: `${name}-text`, rows: 2, maxlength: 4096 }))
        : null;
      return h("fieldset", {}, h("legend", {}, str(question.prompt)), ...choices, free);
    });
    const form = h("form", { class: "question-form" }, ...fields, h("button", { type: "submit" }, "Answer"));
    form.addEventListener("submit", (submitted) => {
      submitted.preventDefault();
      const answers = {};
      (payload.questions ?? []).forEach((question, index) => {
        const name = `q${index}`;
        const selected = [...form.querySelectorAll(`input[name="${name}"]:checked`)].map((input) => input.value);
        const answer = { selected };
        const text = form.querySelector(`textarea[name="${name}-text"]`)?.value.trim();
        if (text) answer.freeText = text;
        answers[question.id] = answer;
      });
      this.answer(request.requestId, { kind: "user_answer", answers }, error);
    });
    return [form];
  }

  toolCall(request, error) {
    const params = request.params ?? {};
    const text = h("textarea", { name: "result", rows: 3, "aria-label": "The tool's result" });
    const form = h(
      "form",
      { class: "tool-form" },
      h("p", {}, `The agent calls ${str(params.tool)} with:`),
      h("pre", { class: "tool-arguments" }, pretty(params.arguments ?? {})),
      h("label", {}, "Result ", text),
      h("button", { type: "submit" }, "Answer"),
      h("button", { type: "button", class: "fail", onclick: () => reply(false) }, "Fail"),
    );
    const reply = (success) => {
      const words = text.value || (success ? "" : "The person using bbridge's page declined this call.");
      this.answer(request.requestId, { success, contentItems: [{ type: "inputText", text: words }] }, error);
    };
    form.addEventListener("submit", (submitted) => {
      submitted.preventDefault();
      reply(true);
    });
    return [form];
  }

  raw(request, error) {
    const text = h("textarea", { name: "result", rows: 3, "aria-label": "The answer, as JSON" });
    const form = h("form", { class: "raw-form" }, h("pre", {}, pretty(request.params)), h("label", {}, "Answer (JSON) ", text), h("button", { type: "submit" }, "Answer"));
    form.addEventListener("submit", (submitted) => {
      submitted.preventDefault();
      let result;
      try {
        result = JSON.parse(text.value);
      } catch (failure) {
        error.textContent = `Not JSON: ${failure.message}`;
        error.hidden = false;
        return;
      }
      this.answer(request.requestId, result, error);
    });
    return [form];
  }
}

function kindWords(request) {
  if (request.method === "item/tool/call") return "Tool call";
  const kind = request.kind ?? request.params?.payload?.kind;
  if (kind === "approval") return "Approval";
  if (kind === "user_question") return "Question";
  return str(kind || "Request");
}
