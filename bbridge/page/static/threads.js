// The threads list and the daemon view. Rows are kept by thread id and updated in place (the list is rebuilt
// only when a thread appears), so a poll every 2 s and a tick every second cost a few text nodes each.

import { h, duration, str } from "./dom.js";

/** A thread's state for the list: waiting on a person beats running beats idle. */
export function threadState(thread) {
  if (thread.waiting.size > 0) return "waiting";
  return thread.turnId ? "running" : "idle";
}

export class ThreadList {
  /** `onOpen(threadId)` when a row is chosen. */
  constructor(root, onOpen) {
    this.root = root;
    this.onOpen = onOpen;
    this.rows = new Map();
    this.selected = null;
    this.empty = h("li", { class: "empty" }, "No threads yet: start one below, or from any client.");
    root.append(this.empty);
  }

  select(threadId) {
    this.selected = threadId;
    for (const [id, row] of this.rows) this.mark(row, id);
  }

  mark(row, threadId) {
    if (threadId === this.selected) row.el.setAttribute("aria-current", "true");
    else row.el.removeAttribute("aria-current");
  }

  /** Show `threads` (a Map of the page's thread records) as they are now. */
  render(threads, now) {
    for (const thread of threads.values()) {
      let row = this.rows.get(thread.threadId);
      if (row === undefined) {
        row = this.makeRow(thread.threadId);
        this.rows.set(thread.threadId, row);
        this.root.append(row.el);
      }
      this.fill(row, thread, now);
    }
    this.empty.hidden = this.rows.size > 0;
  }

  remove(threadId) {
    this.rows.get(threadId)?.el.remove();
    this.rows.delete(threadId);
    this.empty.hidden = this.rows.size > 0;
  }

  makeRow(threadId) {
    const provider = h("span", { class: "provider" });
    const name = h("span", { class: "name" });
    const state = h("span", { class: "state" });
    const age = h("span", { class: "turn-age" });
    const silence = h("span", { class: "silence" });
    const badge = h("span", { class: "badge", hidden: true });
    const open = h(
      "button",
      { type: "button", class: "thread-open" },
      h("span", { class: "thread-head" }, provider, name),
      h("span", { class: "thread-facts" }, state, age, silence, badge),
    );
    const el = h("li", { class: "thread", "data-thread-id": threadId }, open);
    el.addEventListener("click", () => this.onOpen(threadId));
    return { el, open, provider, name, state, age, silence, badge };
  }

  fill(row, thread, now) {
    const state = threadState(thread);
    this.mark(row, thread.threadId);
    row.el.dataset.state = state;
    row.el.dataset.waiting = String(state === "waiting");
    row.provider.textContent = thread.providerId ?? "(no provider)";
    row.name.textContent = thread.name || thread.threadId;
    row.state.textContent = state === "waiting" ? "waiting on you" : state;
    row.age.textContent = thread.turnId && thread.turnAt !== null ? `turn ${duration((now - thread.turnAt) / 1000)}` : "";
    row.silence.textContent =
      thread.turnId && thread.bridgeAt !== null ? `bridge quiet ${duration((now - thread.bridgeAt) / 1000)}` : "";
    const count = thread.waiting.size;
    row.badge.hidden = count === 0;
    row.badge.textContent = count === 0 ? "" : `${count} waiting`;
    const words = [thread.providerId, thread.name || thread.threadId, row.state.textContent];
    if (count) words.push(`${count} request${count > 1 ? "s" : ""} waiting on you`);
    row.open.setAttribute("aria-label", `Open thread ${words.filter(Boolean).join(", ")}`);
  }
}

/** `daemon/status` as a person reads it: the daemon, its bridges, its clients, its counters, refused config. */
export function renderDaemon(root, status) {
  const daemon = status.daemon ?? {};
  const byTransport = Object.entries(daemon.clientsByTransport ?? {})
    .map(([transport, count]) => `${count} ${transport}`)
    .join(", ");
  const providers = h(
    "table",
    { class: "bridges" },
    h("caption", {}, "Bridges"),
    h("thead", {}, h("tr", {}, ...["Provider", "State", "Pid", "Up", "Threads"].map((t) => h("th", { scope: "col" }, t)))),
    h(
      "tbody",
      {},
      ...(status.providers ?? []).map((p) =>
        h(
          "tr",
          { "data-provider-id": str(p.providerId), "data-state": str(p.state) },
          h("th", { scope: "row" }, str(p.providerId)),
          h("td", {}, str(p.state), p.reason ? h("div", { class: "reason" }, str(p.reason)) : null),
          h("td", {}, p.pid ?? "—"),
          h("td", {}, p.uptimeS === undefined ? "—" : duration(p.uptimeS)),
          h("td", {}, p.threads ?? 0),
        ),
      ),
    ),
  );
  const counters = h(
    "dl",
    { class: "counters" },
    ...Object.entries(status.counters ?? {}).flatMap(([name, value]) => [h("dt", {}, name), h("dd", {}, String(value))]),
  );
  const refused = status.config?.refused ?? [];
  const journal = status.journal ?? {};
  const budgets = status.budgets ?? [];
  root.replaceChildren(
    h("h2", {}, "Daemon"),
    h(
      "p",
      { class: "daemon-facts" },
      `${str(daemon.name)} ${str(daemon.version)}, up ${duration(daemon.uptimeS)}; `,
      `${daemon.clients ?? 0} client${daemon.clients === 1 ? "" : "s"}${byTransport ? ` (${byTransport})` : ""}; `,
      `${status.pending ?? 0} pending; `,
      daemon.hiddenThreads ? `${daemon.hiddenThreads} hidden thread${daemon.hiddenThreads === 1 ? "" : "s"} (rooms' own); ` : null,
      `journal ${journal.healthy === false ? "failing" : "healthy"}`,
      journal.dir ? ` in ${str(journal.dir)}` : " (in memory)",
    ),
    providers,
    budgets.length ? budgetTable(budgets) : null,
    h("h3", {}, "Refused configuration"),
    refused.length
      ? h(
          "ul",
          { class: "refused" },
          ...refused.map((r) => h("li", {}, `${str(r.section)}${r.key ? `.${str(r.key)}` : ""}: ${str(r.error)}`)),
        )
      : h("p", { class: "refused-none" }, status.config?.path ? `None (${str(status.config.path)})` : "None (no config file)"),
    h("details", { class: "counters-box" }, h("summary", {}, "Counters"), counters),
  );
}

/** `daemon/status`'s `budgets`: each `[[budgets]]` entry, what its key nearest the limit spent and the limit. */
function budgetTable(budgets) {
  const amount = (spend) =>
    [spend?.tokens === undefined ? null : `${spend.tokens} tokens`, spend?.usd === undefined ? null : `$${Number(spend.usd).toFixed(2)}`]
      .filter(Boolean)
      .join(", ");
  return h(
    "table",
    { class: "budgets" },
    h("caption", {}, "Budgets"),
    h("thead", {}, h("tr", {}, ...["Budget", "Scope", "Window", "Spent", "Limit", "Action"].map((t) => h("th", { scope: "col" }, t)))),
    h(
      "tbody",
      {},
      ...budgets.map((b) =>
        h(
          "tr",
          { "data-budget": str(b.name), "data-over": String(isOver(b)) },
          h("th", { scope: "row" }, str(b.name)),
          h("td", {}, b.scope === "all" ? "all" : `${str(b.scope)} ${str(b.match)}`, b.key ? h("div", { class: "reason" }, str(b.key)) : null),
          h("td", {}, str(b.window)),
          h("td", {}, amount(b.spent)),
          h("td", {}, amount(b.limit)),
          h("td", {}, str(b.action)),
        ),
      ),
    ),
  );
}

function isOver(budget) {
  const { spent = {}, limit = {} } = budget;
  return (limit.tokens !== undefined && spent.tokens >= limit.tokens) || (limit.usd !== undefined && spent.usd >= limit.usd);
}

/** A thread's resolved agent configuration (`agent/configuration`): each `[[agents]]` contribution applied or not
 *  and why, the composed instructions, the hosted-tool selection, the skills; `BB_*` variables by name only. */
export function renderAgentConfig(root, config) {
  const contributions = config.contributions ?? [];
  root.hidden = contributions.length === 0;
  const state = (c) => (c.failed ? "failed" : c.applied ? "applied" : "not applied");
  const tools = config.tools ?? {};
  root.replaceChildren(
    h("summary", {}, `Agent configuration (${contributions.filter((c) => c.applied && !c.failed).length} applied)`),
    h("ul", { class: "contributions" }, ...contributions.map((c) => h("li", { class: state(c).replace(" ", "-") }, `${str(c.id)}: ${state(c)}${c.reason ? ` (${str(c.reason)})` : ""}`))),
    h("dl", {},
      h("dt", {}, `Instructions (${str(config.instructions?.mode)})`),
      h("dd", {}, h("pre", {}, str(config.instructions?.text) || "none")),
      h("dt", {}, "Hosted tools"),
      h("dd", {}, `include: ${(tools.include ?? []).map(str).join(", ") || "all"}; exclude: ${(tools.exclude ?? []).map(str).join(", ") || "none"}`),
      h("dt", {}, "Skills"),
      h("dd", {}, (config.skills ?? []).map((s) => `${str(s.root)}:${str(s.name)} @${str(s.revision).slice(0, 12)}`).join(", ") || "none"),
      h("dt", {}, "Environment"),
      h("dd", {}, Object.keys(config.envVars ?? {}).map(str).join(", ") || "none"),
    ),
  );
}
