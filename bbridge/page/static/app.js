// bbridge's page: wires the connection, the threads list, the open thread's timeline and pending cards, the
// forms that drive an agent, and the daemon view. State lives here; the modules render it.
// Hidden threads (a room's own: `thread/hidden`, or a `daemon/status` row with `hidden: true`) are never listed;
// any thread, a hidden one too, opens by its id from the URL (`#thread=ID`), which names the open thread.
// The open thread's Perspectives runs (a room's `perspectives/runs`; a daemon without the room answers -32601 and is
// not asked again until the page reconnects) show under its title, each member a link to its hidden thread.

import { h, str } from "./dom.js";
import { PendingCards } from "./pending.js";
import { Connection, takeToken } from "./rpc.js";
import { anyRunning, renderRuns } from "./runs.js";
import { ThreadList, renderAgentConfig, renderDaemon } from "./threads.js";
import { Timeline } from "./timeline.js";

const POLL_MS = 2000;
const METHOD_NOT_FOUND = -32601;
const TOKEN_LINE = "Open the URL `bbridge serve --listen` printed (it carries #token=…): this page has no valid token.";
const PROMPTS_KEY = "bbridge.prompts";
const OPTIONS_KEY = "bbridge.options";
const CREQ_ALPHABET = "23456789abcdefghijkmnpqrstuvwxyz";
const POLICIES = {
  full: { permissionMode: "full", permissionScope: "full", approvalReviewer: null, permissionEscalation: null },
  ask: { permissionMode: "accept-edits", permissionScope: "workspace", approvalReviewer: "user", permissionEscalation: "ask" },
};

const $ = (selector) => document.querySelector(selector);
const ui = {
  connection: $("#connection"),
  retry: $("#retry"),
  tokenMissing: $("#token-missing"),
  main: $("#main"),
  threads: $("#threads"),
  title: $("#thread-title"),
  agentConfig: $("#agent-config"),
  runs: $("#runs"),
  timeline: $("#timeline"),
  pending: $("#pending"),
  daemon: $("#daemon"),
  start: $("#start-thread"),
  prompt: $("#prompt"),
  text: $("#prompt-text"),
  send: $("#send"),
  stop: $("#stop"),
};

const threads = new Map(); // threadId → the page's record of it
const pending = new Map(); // requestId → an open request (every thread's)
const mine = new Map(loadJson(PROMPTS_KEY, [])); // clientRequestId → the text this tab sent (shown at once)
const startOptions = new Map(loadJson(OPTIONS_KEY, [])); // threadId → the options this tab started it with
const hiddenThreads = new Set(); // the ids of threads rooms run for themselves: never listed
let current = null; // the open thread's id
let wanted = takeThread(); // the thread the URL names (`#thread=ID`), opened once connected
let pollTimer = null;
let daemonVersion = "0.1.0";
let roomless = false; // the daemon answered `perspectives/runs` with -32601: it runs no Perspectives room
let runsShown = { threadId: null, json: "", running: false }; // the open thread's runs as last rendered

function loadJson(key, fallback) {
  try {
    return JSON.parse(sessionStorage.getItem(key)) ?? fallback;
  } catch {
    return fallback;
  }
}

function saveMap(key, map, keep = 500) {
  sessionStorage.setItem(key, JSON.stringify([...map].slice(-keep)));
}

function clientRequestId() {
  const bytes = crypto.getRandomValues(new Uint8Array(10));
  return `creq_${[...bytes].map((b) => CREQ_ALPHABET[b % 32]).join("")}`;
}

/** The thread id the URL's fragment names (`#thread=ID`, beside the token or alone), or null. */
function takeThread() {
  const match = /(?:^#|&)thread=([^&]*)/.exec(location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

/** The page's threads less the hidden ones: what the list shows. */
function listedThreads() {
  return new Map([...threads].filter(([threadId]) => !hiddenThreads.has(threadId)));
}

/** A thread learnt to be hidden: out of the list (its record kept only while it is the open one). */
function hide(threadId) {
  hiddenThreads.add(threadId);
  list.remove(threadId);
  if (threadId !== current) threads.delete(threadId);
}

function record(threadId, providerId) {
  let thread = threads.get(threadId);
  if (thread === undefined) {
    thread = { threadId, providerId: providerId ?? null, name: "", turnId: null, turnAt: null, bridgeAt: null, waiting: new Set() };
    threads.set(threadId, thread);
  } else if (providerId && !thread.providerId) {
    thread.providerId = providerId;
  }
  return thread;
}

// -- the connection ---------------------------------------------------------------------------------------

const token = takeToken();
const scheme = location.protocol === "https:" ? "wss:" : "ws:";
const connection = new Connection(`${scheme}//${location.host}/rpc`, token, { name: "bbridge-page", version: daemonVersion }, {
  onState: setConnection,
  onOpen: opened,
  onNotification: notified,
  onRequest: asked,
  onRefused: refused,
});

function setConnection(state, detail) {
  const words = { connected: "connected", reconnecting: "reconnecting…", disconnected: "disconnected" };
  ui.connection.dataset.state = state;
  ui.connection.textContent = words[state];
  ui.connection.title = detail ?? "";
  ui.retry.hidden = state !== "reconnecting";
  if (state !== "connected") stopPolling();
  updateDrive();
}

function refused() {
  ui.tokenMissing.textContent = TOKEN_LINE;
  ui.tokenMissing.hidden = false;
  ui.main.hidden = true;
  threads.clear();
  pending.clear();
}

async function opened(init) {
  daemonVersion = str(init.daemon?.version) || daemonVersion;
  connection.clientInfo.version = daemonVersion;
  ui.tokenMissing.hidden = true;
  ui.main.hidden = false;
  fillProviders(init.providers ?? []);
  roomless = false; // a restarted daemon may run the room now
  await poll();
  await relistPending();
  if (current !== null) {
    await timeline.resume();
    await catchUpCards(current);
  }
  startPolling();
  if (wanted !== null) {
    const threadId = wanted;
    wanted = null;
    await openThread(threadId);
  }
}

function startPolling() {
  stopPolling();
  pollTimer = setInterval(poll, POLL_MS);
}

function stopPolling() {
  if (pollTimer !== null) clearInterval(pollTimer);
  pollTimer = null;
}

async function poll() {
  let status;
  try {
    status = await connection.request("daemon/status", { includeHidden: true });
  } catch {
    return; // the connection says so
  }
  const now = Date.now();
  for (const row of status.threads ?? []) {
    if (!row.hidden) continue;
    hide(row.threadId);
    if (row.threadId === current) record(row.threadId, row.providerId); // the open one: its provider drives it
  }
  const rows = (status.threads ?? []).filter((row) => !row.hidden);
  const listed = new Set(rows.map((row) => row.threadId));
  for (const [threadId, thread] of threads) {
    if (thread.listed && !listed.has(threadId) && threadId !== current) {
      threads.delete(threadId); // the daemon forgot it (restarted without --journal)
      list.remove(threadId);
    }
  }
  for (const row of rows) {
    const thread = record(row.threadId, row.providerId);
    thread.listed = true;
    thread.providerId = row.providerId ?? thread.providerId;
    if (row.name) thread.name = str(row.name); // its latest thread/name/updated (null: none since the daemon started)
    const live = current === row.threadId && timeline.threadId === current;
    if (!live) thread.turnId = row.openTurn?.turnId ?? null;
    thread.turnAt = row.openTurn ? now - row.openTurn.ageS * 1000 : null;
    thread.bridgeAt = row.sinceBridgeS === null || row.sinceBridgeS === undefined ? null : now - row.sinceBridgeS * 1000;
    thread.waiting = new Set((row.waitingOn ?? []).map((w) => w.requestId));
  }
  const open = current && threads.get(current);
  if (current !== null && (runsShown.running || openTurnOf(open))) showRuns(current); // a run may start in a turn
  renderThreads();
  renderDaemon(ui.daemon, status);
  for (const option of ui.start.elements.provider.options) {
    const provider = (status.providers ?? []).find((p) => p.providerId === option.value);
    if (provider) option.textContent = `${provider.providerId} (${str(provider.state)})`;
  }
}

/** What is open now (every thread's): after a reconnect, requests resolved meanwhile are gone. */
async function relistPending() {
  const listing = await connection.request("thread/pending", {});
  pending.clear();
  for (const request of listing.pending ?? []) pending.set(request.requestId, request);
}

/** The open thread's cards: what is pending, and the resolutions of cards this page still shows. */
async function catchUpCards(threadId) {
  const listing = await connection.request("thread/pending", { threadId });
  if (threadId !== current) return;
  for (const request of listing.pending ?? []) cards.show(request);
  for (const resolution of listing.resolved ?? []) cards.resolve(resolution);
}

function notified(method, params) {
  if (method === "thread/hidden") {
    hide(params.threadId);
    renderThreads();
  } else if (method === "thread/events") {
    if (hiddenThreads.has(params.threadId) && params.threadId !== current) return; // not listed, not open
    const thread = record(params.threadId, params.providerId);
    for (const { event } of params.events ?? []) {
      if (event.type === "turn/started") {
        thread.turnId = event.scope?.turnId ?? "?";
        thread.turnAt = Date.now();
      } else if (event.type === "turn/completed") {
        thread.turnId = null;
        if (params.threadId === current) showRuns(current); // a run its turn started, or one it was delivered
      } else if (event.type === "thread/name/updated") {
        thread.name = str(event.threadName);
      }
    }
    thread.bridgeAt = Date.now();
    if (params.threadId === current) timeline.accept(params.events ?? []);
    renderThreads();
  } else if (method === "interaction/opened") {
    pending.set(params.requestId, params);
    if (params.threadId && !hiddenThreads.has(params.threadId)) record(params.threadId, params.providerId).waiting.add(params.requestId);
    if (params.threadId === current) cards.show(params);
    renderThreads();
  } else if (method === "interaction/resolved") {
    pending.delete(params.requestId);
    if (params.threadId) threads.get(params.threadId)?.waiting.delete(params.requestId);
    cards.resolve(params);
    renderThreads();
  } else if (method === "thread/input") {
    if (params.threadId === current && timeline.threadId === current) timeline.input(params);
  } else if (method === "bridge/status") {
    poll();
  }
}

/** A relayed bridge request (this page owns the thread, or is the last client): left to the card, which answers
 *  with interaction/respond (the daemon withdraws the relay once the request is resolved). */
function asked(method) {
  if (method === "interaction/request" || method === "item/tool/call") return undefined;
  throw Object.assign(new Error(`the page does not answer ${method}`), { code: -32601 });
}

// -- the threads list and the open thread ----------------------------------------------------------------------

const list = new ThreadList(ui.threads, (threadId) => openThread(threadId));
const timeline = new Timeline(ui.timeline, {
  fetch: (threadId, afterSeq) => connection.request("thread/events", { threadId, afterSeq }),
  fetchInputs: (threadId, afterSentAt) =>
    connection.request("thread/inputs", afterSentAt === null ? { threadId } : { threadId, afterSentAt }),
  mine,
  onTurn: (turnId) => {
    const thread = current && threads.get(current);
    if (thread) thread.turnId = turnId;
    updateDrive();
  },
  onShown: () => cards.refresh(),
  onName: (name) => {
    const thread = current && threads.get(current);
    if (thread) thread.name = name;
    renderTitle();
  },
});
const cards = new PendingCards(ui.pending, {
  respond: (requestId, result) => connection.request("interaction/respond", { requestId, result }),
  itemFor: (itemId) => timeline.items.get(itemId)?.item ?? null,
  onClosed: () => (ui.text.disabled ? ui.timeline : ui.text).focus(),
});

function renderThreads() {
  list.render(listedThreads(), Date.now());
  renderTitle();
  updateDrive();
}

function renderTitle() {
  const thread = current && threads.get(current);
  ui.title.textContent = thread ? `${thread.providerId ?? "?"} · ${thread.name || thread.threadId}` : "No thread open";
}

async function openThread(threadId) {
  if (current === threadId && timeline.threadId === threadId) return;
  current = threadId;
  record(threadId); // one opened by its id (the URL) may be in no list
  history.replaceState(null, "", `${location.pathname}${location.search}#thread=${encodeURIComponent(threadId)}`);
  list.select(threadId);
  cards.clear();
  renderThreads();
  ui.text.disabled = false;
  const opening = timeline.open(threadId);
  for (const request of pending.values()) if (request.threadId === threadId) cards.show(request);
  if (window.matchMedia("(max-width: 800px)").matches) ui.title.scrollIntoView({ block: "start" }); // one column
  ui.agentConfig.hidden = true;
  renderRuns(ui.runs, []);
  runsShown = { threadId, json: "", running: false };
  await opening;
  if (connection.ready) await catchUpCards(threadId).catch(() => {});
  if (connection.ready) await showAgentConfig(threadId).catch(() => {});
  if (connection.ready) await showRuns(threadId);
  ui.timeline.focus({ preventScroll: true });
}

async function showAgentConfig(threadId) {
  const config = await connection.request("agent/configuration", { threadId });
  if (current === threadId) renderAgentConfig(ui.agentConfig, config);
}

/** The open thread's Perspectives runs, rendered again only when they changed. */
async function showRuns(threadId) {
  if (roomless || !connection.ready) return;
  let result;
  try {
    result = await connection.request("perspectives/runs", { threadId });
  } catch (error) {
    if (error.code === METHOD_NOT_FOUND) roomless = true; // no room: not asked again until the page reconnects
    return;
  }
  if (current !== threadId) return;
  const runs = result.runs ?? [];
  const json = JSON.stringify(runs);
  if (runsShown.threadId === threadId && runsShown.json === json) return;
  runsShown = { threadId, json, running: anyRunning(runs) };
  renderRuns(ui.runs, runs);
}

// -- driving: start a thread, prompt, steer, stop ------------------------------------------------------------

function fillProviders(providers) {
  const select = ui.start.elements.provider;
  const chosen = select.value;
  select.replaceChildren(...providers.map((p) => h("option", { value: p.providerId }, `${p.providerId} (${p.state})`)));
  if (providers.some((p) => p.providerId === chosen)) select.value = chosen;
  loadModels();
}

async function loadModels() {
  const provider = ui.start.elements.provider.value;
  const select = ui.start.elements.model;
  const fallback = h("option", { value: "" }, "the provider's default");
  select.replaceChildren(fallback);
  if (!provider) return;
  const cwd = ui.start.elements.cwd.value.trim();
  try {
    const result = await connection.request("model/list", { providerId: provider, ...(cwd ? { cwd } : {}) });
    if (ui.start.elements.provider.value !== provider) return;
    for (const model of result.models ?? []) {
      const option = h("option", { value: str(model.model || model.id) }, str(model.displayName || model.model || model.id));
      select.append(option);
      if (model.isDefault) fallback.textContent = `the provider's default (${str(model.displayName || model.model)})`;
    }
  } catch (error) {
    fallback.textContent = "the provider's default (it lists no models)";
    fallback.title = error.message;
  }
}

function options(threadId, base) {
  const kept = startOptions.get(threadId);
  return { ...(kept ?? base ?? POLICIES[ui.start.elements.permission.value]), envVars: {} };
}

function formError(form, error) {
  const line = form.querySelector(".form-error");
  line.textContent = error ? error.message : "";
  line.hidden = !error;
}

ui.start.elements.provider.addEventListener("change", loadModels);
ui.start.elements.cwd.addEventListener("change", loadModels);
ui.start.addEventListener("submit", async (submitted) => {
  submitted.preventDefault();
  const form = ui.start.elements;
  const providerId = form.provider.value;
  const threadId = `thr_page_${clientRequestId().slice(5)}`;
  const chosen = { ...POLICIES[form.permission.value], ...(form.model.value ? { model: form.model.value } : {}) };
  formError(ui.start, null);
  const button = ui.start.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    await connection.request("thread/start", { providerId, threadId, cwd: form.cwd.value.trim(), options: { ...chosen, envVars: {} } });
    startOptions.set(threadId, chosen);
    saveMap(OPTIONS_KEY, startOptions);
    record(threadId, providerId);
    await openThread(threadId);
    ui.text.focus();
  } catch (error) {
    formError(ui.start, error);
  } finally {
    button.disabled = false;
  }
});

function openTurnOf(thread) {
  return current !== null && timeline.threadId === current ? timeline.openTurn ?? thread?.turnId ?? null : thread?.turnId ?? null;
}

function updateDrive() {
  const thread = current && threads.get(current);
  const usable = Boolean(thread?.providerId) && connection.ready;
  const turn = openTurnOf(thread);
  ui.text.disabled = !thread;
  ui.text.placeholder = thread
    ? `${turn ? "Steer the running turn" : "Write to the agent"} (Ctrl+Enter sends)`
    : "Open or start a thread first";
  ui.send.disabled = !usable;
  ui.send.textContent = turn ? "Steer" : "Send";
  ui.stop.disabled = !(usable && turn);
}

ui.text.addEventListener("keydown", (key) => {
  if (key.key === "Enter" && (key.ctrlKey || key.metaKey)) {
    key.preventDefault();
    ui.prompt.requestSubmit();
  }
});

ui.prompt.addEventListener("submit", async (submitted) => {
  submitted.preventDefault();
  const thread = current && threads.get(current);
  const text = ui.text.value;
  if (!thread || !text.trim()) return;
  const creq = clientRequestId();
  const turn = openTurnOf(thread);
  const params = {
    providerId: thread.providerId,
    threadId: thread.threadId,
    input: [{ type: "text", text, mentions: [] }],
    clientRequestId: creq,
    options: options(thread.threadId),
    ...(turn ? { expectedTurnId: turn } : {}),
  };
  mine.set(creq, text);
  saveMap(PROMPTS_KEY, mine);
  formError(ui.prompt, null);
  ui.send.disabled = true;
  try {
    await connection.request(turn ? "turn/steer" : "turn/start", params);
    ui.text.value = "";
  } catch (error) {
    formError(ui.prompt, error);
  } finally {
    updateDrive();
  }
});

ui.stop.addEventListener("click", async () => {
  const thread = current && threads.get(current);
  const turn = openTurnOf(thread);
  if (!thread || !turn) return;
  formError(ui.prompt, null);
  ui.stop.disabled = true;
  try {
    await connection.request("thread/stop", { providerId: thread.providerId, threadId: thread.threadId, intent: "interrupt", activeTurnId: turn });
  } catch (error) {
    formError(ui.prompt, error);
  } finally {
    updateDrive();
  }
});

document.addEventListener("visibilitychange", () => document.hidden || connection.retryNow());
ui.retry.addEventListener("click", () => connection.retryNow());
window.addEventListener("hashchange", () => {
  const named = takeThread();
  if (/token=/.test(location.hash)) {
    const fresh = takeToken();
    if (fresh) connection.useToken(fresh);
  }
  if (named === null) return;
  if (connection.ready) openThread(named);
  else wanted = named;
});
setInterval(() => threads.size && list.render(listedThreads(), Date.now()), 1000);
connection.start();
