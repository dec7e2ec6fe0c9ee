// The open thread's Perspectives runs (`perspectives/runs {threadId}`, a room's method): each run under the
// thread's title, its members each a link to its hidden thread's timeline (`#thread=ID`). Text only.

import { h, duration, str } from "./dom.js";

/** One run's state as a person reads it: its phase while it runs, its outcome once done. */
export function runState(run) {
  return run.phase === "done" ? str(run.outcome) || "done" : `running (${str(run.phase)})`;
}

/** A member's seconds: tenths under ten seconds (instant agents too), else as the rest of the page says them. */
function seconds(value) {
  return Number.isFinite(value) && value < 10 ? `${Math.max(0, value).toFixed(1)}s` : duration(value);
}

/** Whether any of `runs` is still going (the page then refreshes them with its status poll). */
export function anyRunning(runs) {
  return runs.some((run) => run.phase !== "done");
}

/** `runs` (newest last, as the room keeps them) into `root`, newest first; hidden when there are none. */
export function renderRuns(root, runs) {
  root.hidden = runs.length === 0;
  if (!runs.length) {
    root.replaceChildren();
    return;
  }
  const running = runs.filter((run) => run.phase !== "done").length;
  const summary = `Perspectives runs (${runs.length}${running ? `, ${running} running` : ""})`;
  root.replaceChildren(
    h("h3", {}, summary),
    h("ol", { class: "run-list", reversed: true }, ...[...runs].reverse().map(renderRun)),
  );
}

function renderRun(run) {
  const lenses = (run.lenses ?? []).map(str);
  const facts = [str(run.runId), str(run.tool), runState(run)];
  return h(
    "li",
    { class: "run", "data-run-id": str(run.runId), "data-phase": str(run.phase), "data-outcome": str(run.outcome) },
    h("div", { class: "run-head" }, facts.join(" · ")),
    lenses.length ? h("div", { class: "run-lenses" }, `Lenses: ${lenses.join(", ")}`) : null,
    h("ul", { class: "run-members" }, ...(run.members ?? []).map(renderMember)),
  );
}

function renderMember(member) {
  const threadId = str(member.threadId);
  const what = [str(member.role), member.lens === undefined ? null : `lens ${str(member.lens)}`];
  const agent = `${str(member.providerId)}${member.model ? ` (${str(member.model)})` : ""}`;
  const words = [...what.filter(Boolean), agent, str(member.status), seconds(member.seconds)];
  return h(
    "li",
    { class: "run-member", "data-status": str(member.status), "data-role": str(member.role) },
    h(
      "a",
      {
        href: `#thread=${encodeURIComponent(threadId)}`,
        "data-thread-id": threadId,
        title: `Open the timeline of ${threadId}`,
      },
      words.join(" · "),
    ),
  );
}
