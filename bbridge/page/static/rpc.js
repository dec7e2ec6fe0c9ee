// The page's connection to the daemon: JSON-RPC 2.0 over a WebSocket to /rpc on the page's own origin, one
// message per text frame. The token comes once from the URL's fragment (#token=…), is kept in sessionStorage
// (this tab only) and the fragment is removed; it is sent in `initialize` (a browser cannot set Authorization on a
// WebSocket). A dropped connection is retried with backoff (0.5 s doubling to 10 s, with jitter); each time it
// opens, `onOpen` runs after `initialize` so the page re-lists and resumes what it shows. A refused token stops
// the retries: nothing will change until the page is opened with the right URL.

const TOKEN_KEY = "bbridge.token";
export const UNAUTHORIZED = -32016;
const FIRST_DELAY_MS = 500;
const MAX_DELAY_MS = 10000;
const REQUEST_TIMEOUT_MS = 120000; // a thread/start may spawn and handshake a bridge first

/** The token for this tab: from the fragment (then removed from the address bar), else as kept. */
export function takeToken(location = window.location, history = window.history, storage = window.sessionStorage) {
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (match) {
    storage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return storage.getItem(TOKEN_KEY);
}

export class RpcError extends Error {
  constructor(method, error) {
    super(`${method}: ${error.message ?? "error"} (${error.code})`);
    this.code = error.code;
    this.data = error.data;
  }
}

export class Connection {
  /** `handlers`: onState(state, detail), onOpen(initializeResult), onNotification(method, params),
   *  onRequest(method, params) → result (or throws), onRefused(message). */
  constructor(url, token, clientInfo, handlers) {
    this.url = url;
    this.token = token;
    this.clientInfo = clientInfo;
    this.handlers = handlers;
    this.nextId = 1;
    this.calls = new Map();
    this.socket = null;
    this.delay = FIRST_DELAY_MS;
    this.timer = null;
    this.refused = false;
    this.ready = false;
  }

  start() {
    this.open();
  }

  open() {
    this.timer = null;
    const socket = new WebSocket(this.url);
    this.socket = socket;
    socket.addEventListener("open", () => this.initialize(socket));
    socket.addEventListener("message", (message) => this.receive(socket, message.data));
    socket.addEventListener("close", () => this.closed(socket));
    socket.addEventListener("error", () => {}); // a close follows
  }

  async initialize(socket) {
    const params = { client: this.clientInfo, protocolVersion: 1 };
    if (this.token) params.token = this.token;
    let result;
    try {
      result = await this.request("initialize", params);
    } catch (error) {
      if (socket !== this.socket) return;
      if (error.code === UNAUTHORIZED) {
        this.refused = true;
        this.handlers.onRefused(error.message);
      }
      socket.close();
      return;
    }
    if (socket !== this.socket) return;
    this.ready = true;
    this.delay = FIRST_DELAY_MS;
    this.handlers.onState("connected");
    try {
      await this.handlers.onOpen(result);
    } catch (error) {
      console.warn("bbridge page: resuming after the connection opened failed", error);
    }
  }

  closed(socket) {
    if (socket !== this.socket) return;
    this.socket = null;
    this.ready = false;
    this.dropCalls();
    if (this.refused) {
      this.handlers.onState("disconnected", "the token was refused");
      return;
    }
    const wait = this.delay * (0.75 + Math.random() * 0.5);
    this.delay = Math.min(MAX_DELAY_MS, this.delay * 2);
    this.handlers.onState("reconnecting", `retrying in ${(wait / 1000).toFixed(1)}s`);
    this.timer = setTimeout(() => this.open(), wait);
  }

  /** A new token (the URL was opened again in this tab, with its fragment): connect again with it. */
  useToken(token) {
    this.token = token;
    this.refused = false;
    this.delay = FIRST_DELAY_MS;
    if (this.timer !== null) clearTimeout(this.timer);
    const socket = this.socket;
    this.socket = null;
    this.ready = false;
    this.dropCalls();
    if (socket !== null) socket.close();
    this.open();
  }

  dropCalls() {
    for (const call of this.calls.values()) call.reject(new Error("the connection to the daemon closed"));
    this.calls.clear();
  }

  /** Retry now (a person asked, or the tab came back): the backoff starts over. */
  retryNow() {
    if (this.timer === null || this.refused) return;
    clearTimeout(this.timer);
    this.delay = FIRST_DELAY_MS;
    this.open();
  }

  request(method, params) {
    const socket = this.socket;
    if (socket === null || socket.readyState !== WebSocket.OPEN) {
      return Promise.reject(new Error(`not connected to the daemon (${method} was not sent)`));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.calls.delete(id);
        reject(new Error(`${method}: no answer from the daemon in ${REQUEST_TIMEOUT_MS / 1000}s`));
      }, REQUEST_TIMEOUT_MS);
      this.calls.set(id, {
        resolve: (value) => (clearTimeout(timer), resolve(value)),
        reject: (error) => (clearTimeout(timer), reject(error)),
        method,
      });
      socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    });
  }

  receive(socket, data) {
    if (socket !== this.socket || typeof data !== "string") return;
    let message;
    try {
      message = JSON.parse(data);
    } catch {
      console.warn("bbridge page: a frame that is not JSON", data.slice(0, 200));
      return;
    }
    if (typeof message.method === "string") {
      if ("id" in message) this.answer(socket, message);
      else this.handlers.onNotification(message.method, message.params ?? {});
      return;
    }
    const call = this.calls.get(message.id);
    if (call === undefined) return;
    this.calls.delete(message.id);
    if (message.error) call.reject(new RpcError(call.method, message.error));
    else call.resolve(message.result);
  }

  async answer(socket, message) {
    let reply;
    try {
      const result = await this.handlers.onRequest(message.method, message.params ?? {});
      if (result === undefined) return; // left unanswered on purpose: answered elsewhere (interaction/respond)
      reply = { jsonrpc: "2.0", id: message.id, result };
    } catch (error) {
      reply = { jsonrpc: "2.0", id: message.id, error: { code: error.code ?? -32601, message: error.message } };
    }
    if (socket === this.socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(reply));
  }
}
