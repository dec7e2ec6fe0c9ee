/**
 * A TypeScript client of the bbridge daemon's API (`../openrpc.json`; the types in `./api.ts` are generated from
 * it by `npm run generate`). Node only: a Unix socket, a `ws://` or `wss://` URL (`bbridge serve --listen`, over
 * node ≥ 22's global `WebSocket`), or `bbridge serve` spawned on stdio.
 *
 *     const client = await Client.connect("/run/bbridge.sock", { token });   // or "ws://127.0.0.1:8765"
 *     await client.request("thread/start", { providerId: "echo", threadId: "thr_1", cwd, options });
 *     for await (const entry of client.events("thr_1")) console.log(entry.seq, entry.event.type);
 *
 * - `request(method, params)` is typed by `Methods`: the params the daemon decodes, the result it answers. A
 *   refusal rejects with `DaemonError` carrying the daemon's code (`ErrorCodes`), its `data`, and a `message`
 *   that adds the reason `data` gives (a -32602's `[{path, message}]`).
 * - `turn/start` and `turn/steer` need a `clientRequestId` (`ClientRequestId`: `^creq_[23456789a-km-z]{10}$`,
 *   echoed by the `turn/input/accepted` that accepts the input); `request` mints one (`clientRequestId()`) when
 *   the params leave it out. Mint it yourself to know which `turn/input/accepted` is your input's.
 * - `events(threadId, afterSeq)` yields the thread's events once each, in `seq` order: the journal's replay,
 *   then the live `thread/events`. When the connection drops it reconnects (bounded retries) and resumes after the
 *   last `seq` it yielded (`thread/events {afterSeq}`): no gap, no duplicate.
 * - Relayed bridge requests (`interaction/request`, `item/tool/call`) go to `onRequest`; its value is the
 *   answer, and `LEAVE` (or no handler) leaves the request pending for any client's `interaction/respond`.
 */
import { spawn as spawnProcess, type ChildProcess } from "node:child_process";
import { randomInt } from "node:crypto";
import { createConnection } from "node:net";

import type { ClientRequestId, ClientRequests, Methods, Notifications } from "./api.js";

export * from "./api.js";

export type MethodName = keyof Methods;
export type Params<M extends MethodName> = Methods[M]["params"];
export type Result<M extends MethodName> = Methods[M]["result"];

/** The methods whose `clientRequestId` the client mints when the caller leaves it out. */
export type MintedMethod = "turn/start" | "turn/steer";
const MINTED: ReadonlySet<string> = new Set<MintedMethod>(["turn/start", "turn/steer"]);

/** What `request` takes: the daemon's `Params`, with `clientRequestId` optional where the client mints it. */
export type CallParams<M extends MethodName> = M extends MintedMethod
  ? Omit<Params<M>, "clientRequestId"> & { clientRequestId?: ClientRequestId }
  : Params<M>;

const ALPHABET = "23456789abcdefghijkmnpqrstuvwxyz"; // protocol.md §3.2: no 0, 1, l or o
const CLIENT_REQUEST_ID = /^creq_[23456789a-km-z]{10}$/;

/** A fresh `clientRequestId`: `creq_` and 10 random characters of the protocol's alphabet (50 bits). */
export function clientRequestId(): ClientRequestId {
  let id = "";
  for (let i = 0; i < 10; i++) id += ALPHABET[randomInt(ALPHABET.length)];
  return `creq_${id}`;
}

/** Whether a string is a `clientRequestId` the bridges accept (a string from elsewhere, before it is sent). */
export function isClientRequestId(value: string): value is ClientRequestId {
  return CLIENT_REQUEST_ID.test(value);
}

/** One notification from the daemon, discriminated by `method`. */
export type Notification = { [M in keyof Notifications]: { method: M; params: Notifications[M] } }[keyof Notifications];

/** One relayed bridge request, discriminated by `method`. */
export type RelayedRequest = {
  [M in keyof ClientRequests]: { method: M; params: ClientRequests[M]["params"] };
}[keyof ClientRequests];

/** An `onRequest` answer: not mine, leave it pending for another client. */
export const LEAVE: unique symbol = Symbol("bbridge.leave");
export type RequestHandler = (request: RelayedRequest) => Promise<unknown>;

/** One event of a thread, as `events()` yields it. */
export interface ThreadEntry {
  threadId: string;
  seq: number;
  event: { type: string; [key: string]: unknown };
}

export interface Options {
  token?: string;
  onRequest?: RequestHandler;
  onNotification?: (notification: Notification) => void;
  clientName?: string;
}

const DISCONNECTED = -32099;
const URL_SCHEME = /^wss?:\/\//;
const RPC_PATH = "/rpc"; // where `bbridge serve --listen` upgrades to the client API
const RETRIES = 50;
const RETRY_MS = 100;
const REASON_MAX = 500; // characters of an error's `data` shown in its message

/** A refusal's reason from its `data`, one line: a -32602's `[{path, message}]` issues (what the bridges' kit
 * sends) as `path.to.field: message`, a string as itself, anything else as JSON. */
export function errorReason(data: unknown): string {
  if (data === undefined || data === null) return "";
  const issues = Array.isArray(data) && data.length > 0 && data.every((i) => typeof i === "object" && i && "message" in i);
  let text: string;
  if (issues) {
    text = (data as { path?: unknown; message: unknown }[])
      .map(({ path, message }) => {
        const dotted = Array.isArray(path) ? path.join(".") : "";
        return dotted ? `${dotted}: ${String(message)}` : String(message);
      })
      .join("; ");
  } else {
    text = typeof data === "string" ? data : JSON.stringify(data);
  }
  return text.length <= REASON_MAX ? text : `${text.slice(0, REASON_MAX - 1)}…`;
}

/** The daemon refused a request: its JSON-RPC error code, message and data. `message` adds the reason `data`
 * gives (`Invalid params for turn/start (-32602): clientRequestId: Expected ...`); `daemonMessage` is the
 * daemon's message alone. */
export class DaemonError extends Error {
  readonly daemonMessage: string;

  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    const reason = errorReason(data);
    super(`${message} (${code})${reason ? `: ${reason}` : ""}`);
    this.name = "DaemonError";
    this.daemonMessage = message;
  }
}

/** The connection ended with the request outstanding. */
export class Disconnected extends DaemonError {
  constructor(message = "the daemon closed the connection") {
    super(DISCONNECTED, message);
    this.name = "Disconnected";
  }
}

interface Transport {
  write(line: string): void;
  close(): void;
}

interface Waiter {
  resolve(result: unknown): void;
  reject(error: Error): void;
}

/** Notifications of one connection, for one reader: queued from the moment it subscribes until it ends. */
class Subscription {
  private readonly queue: Notification[] = [];
  private wake: (() => void) | null = null;
  ended = false;

  push(note: Notification): void {
    this.queue.push(note);
    this.wake?.();
  }

  end(): void {
    this.ended = true;
    this.wake?.();
  }

  async next(): Promise<Notification | null> {
    while (this.queue.length === 0 && !this.ended) {
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = null;
    }
    return this.queue.shift() ?? null;
  }
}

/** One open connection: JSON-RPC over LF-delimited JSON lines. */
class Connection {
  private buffer = "";
  private nextId = 1;
  private readonly waiting = new Map<number, Waiter>();
  readonly subscriptions = new Set<Subscription>();
  closed = false;

  constructor(
    private readonly transport: Transport,
    private readonly onMessage: (message: Record<string, unknown>) => void,
  ) {}

  feed(chunk: string): void {
    this.buffer += chunk;
    let end: number;
    while ((end = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, end).trim();
      this.buffer = this.buffer.slice(end + 1);
      if (line) this.dispatch(JSON.parse(line) as Record<string, unknown>);
    }
  }

  private dispatch(message: Record<string, unknown>): void {
    if (!("method" in message)) {
      const waiter = this.waiting.get(message.id as number);
      if (waiter === undefined) return;
      this.waiting.delete(message.id as number);
      const error = message.error as { code?: number; message?: string; data?: unknown } | undefined;
      if (error) waiter.reject(new DaemonError(error.code ?? -32603, error.message ?? "", error.data));
      else waiter.resolve(message.result);
      return;
    }
    if (!("id" in message)) {
      for (const subscription of this.subscriptions) subscription.push(message as unknown as Notification);
    }
    this.onMessage(message);
  }

  request(method: string, params: unknown): Promise<unknown> {
    if (this.closed) return Promise.reject(new Disconnected());
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.send({ jsonrpc: "2.0", id, method, params });
    });
  }

  send(message: unknown): void {
    if (!this.closed) this.transport.write(JSON.stringify(message) + "\n");
  }

  ended(): void {
    if (this.closed) return;
    this.closed = true;
    for (const waiter of this.waiting.values()) waiter.reject(new Disconnected());
    this.waiting.clear();
    for (const subscription of this.subscriptions) subscription.end();
  }

  drop(): void {
    this.transport.close();
    this.ended();
  }
}

type Opener = (connection: (transport: Transport) => Connection) => Promise<Connection>;

/** Each connection a WebSocket (node ≥ 22's global one): each text message one line, each line one text frame. The
 * token goes as `Authorization: Bearer` on the upgrade (and in `initialize`, as on a socket). A `wss://` server's
 * certificate is checked against node's CAs: give a private CA with `NODE_EXTRA_CA_CERTS`. */
function webSocketOpener(url: string, token: string | undefined): Opener {
  const target = new URL(url);
  if (target.pathname === "/" || target.pathname === "") target.pathname = RPC_PATH;
  const headers: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
  return (wrap) =>
    new Promise((resolve, reject) => {
      if (typeof globalThis.WebSocket !== "function") {
        throw new Error(`${url}: connecting by URL needs node ≥ 22 (its global WebSocket); this is node ${process.version}`);
      }
      const socket = new WebSocket(target, { headers });
      let opened = false;
      const connection = wrap({ write: (line) => socket.send(line.trimEnd()), close: () => socket.close() });
      socket.addEventListener("open", () => {
        opened = true;
        resolve(connection);
      });
      socket.addEventListener("message", (event: MessageEvent) => {
        if (typeof event.data === "string") connection.feed(`${event.data.replace(/[\r\n]/g, " ")}\n`);
      });
      socket.addEventListener("error", () => {
        // the browser API says no more: a refused upgrade (401: the token; 403: this Host or Origin) looks the same
        if (!opened) reject(new Error(`${target.href}: the WebSocket upgrade failed (nothing listens, or it refused the token, Host or Origin)`));
      });
      socket.addEventListener("close", () => connection.ended());
    });
}

/** One client of the daemon. */
export class Client {
  private connection: Connection;
  private reopening: Promise<void> | null = null;
  private closing = false;

  private constructor(
    private readonly opener: Opener,
    private readonly options: Options,
    private readonly reconnects: boolean,
    first: Connection,
  ) {
    this.connection = first;
  }

  /** The daemon on a Unix socket, or at a `ws://` or `wss://` URL (`bbridge serve --listen`; `/rpc` when the URL
   * names no path); `events` reconnects to it when the connection drops. */
  static async connect(where: string, options: Options = {}): Promise<Client> {
    if (URL_SCHEME.test(where)) return Client.open(webSocketOpener(where, options.token), options, true);
    const path = where;
    const opener: Opener = (wrap) =>
      new Promise((resolve, reject) => {
        const socket = createConnection(path);
        socket.setEncoding("utf8");
        const connection = wrap({ write: (line) => socket.write(line), close: () => socket.destroy() });
        socket.once("connect", () => resolve(connection));
        socket.on("data", (chunk: string) => connection.feed(chunk));
        socket.on("error", (error) => (connection.closed ? undefined : reject(error)));
        socket.on("close", () => connection.ended());
      });
    return Client.open(opener, options, true);
  }

  /** The daemon (`bbridge serve`) as a child on stdio; `close()` ends it. */
  static async spawn(argv: string[], options: Options = {}): Promise<Client> {
    const [command, ...args] = argv;
    if (command === undefined) throw new Error("spawn: an empty command line");
    let child: ChildProcess | null = null;
    const opener: Opener = (wrap) =>
      new Promise((resolve, reject) => {
        child = spawnProcess(command, args, { stdio: ["pipe", "pipe", "inherit"] });
        const { stdin, stdout } = child;
        if (stdin === null || stdout === null) throw new Error("spawn: no stdio pipes");
        stdout.setEncoding("utf8");
        const connection = wrap({ write: (line) => stdin.write(line), close: () => child?.kill("SIGTERM") });
        child.once("spawn", () => resolve(connection));
        child.once("error", reject);
        stdout.on("data", (chunk: string) => connection.feed(chunk));
        stdout.on("close", () => connection.ended());
      });
    return Client.open(opener, options, false);
  }

  private static async open(opener: Opener, options: Options, reconnects: boolean): Promise<Client> {
    let client: Client | null = null;
    const first = await opener((transport) => new Connection(transport, (m) => client?.onMessage(m)));
    client = new Client(opener, options, reconnects, first);
    await client.initialize();
    return client;
  }

  // -- calls ---------------------------------------------------------------------------------------------------

  /** The result of one request; rejects with `DaemonError` (the daemon's code) when it refuses. A `turn/start` or
   * `turn/steer` without a `clientRequestId` gets a fresh one (the caller's params are not changed). */
  async request<M extends MethodName>(method: M, params: CallParams<M>): Promise<Result<M>> {
    const given = params as { clientRequestId?: string | null };
    const sent = MINTED.has(method) && given.clientRequestId == null ? { ...params, clientRequestId: clientRequestId() } : params;
    return (await this.connection.request(method, sent)) as Result<M>;
  }

  initialize(): Promise<Result<"initialize">> {
    const params: Params<"initialize"> = {
      protocolVersion: 1,
      client: { name: this.options.clientName ?? "bbridge-ts", version: "0.1.0" },
    };
    if (this.options.token !== undefined) params.token = this.options.token;
    return this.request("initialize", params);
  }

  /** `daemon/status`; with `includeHidden` the hidden threads' rows too (`hidden: true`, `runId`, `role`). */
  status(includeHidden = false): Promise<Result<"daemon/status">> {
    return this.request("daemon/status", includeHidden ? { includeHidden } : {});
  }

  threadEvents(threadId: string, afterSeq = 0): Promise<Result<"thread/events">> {
    return this.request("thread/events", { threadId, afterSeq });
  }

  pending(threadId?: string): Promise<Result<"thread/pending">> {
    return this.request("thread/pending", threadId === undefined ? {} : { threadId });
  }

  /** What `[[agents]]` resolves to for a thread, or for `{cwd, providerId, model?}`. */
  agentConfiguration(asked: { threadId: string } | { cwd: string; providerId: string; model?: string }): Promise<Result<"agent/configuration">> {
    return this.request("agent/configuration", asked);
  }

  /** The usage ledger's booked turns summed by `groupBy` (provider, model, thread, client, day, run), those booked
   * in [`since`, `until`) (seconds since the epoch), with `usd` where `[pricing."MODEL"]` prices a model. */
  usageSummary(groupBy: Params<"usage/summary">["groupBy"] = [], range: { since?: number; until?: number } = {}): Promise<Result<"usage/summary">> {
    return this.request("usage/summary", { groupBy, ...range });
  }

  /** The `[[budgets]]` as a `turn/start` with these keys meets them: rejects with `DaemonError` code
   * `BUDGET_EXCEEDED` (-32023, its `data` the budget, spent and limit) when one refuses; an `ask` budget waits for
   * its approval first. */
  budgetsCheck(params: Params<"budgets/check"> = {}): Promise<Result<"budgets/check">> {
    return this.request("budgets/check", params);
  }

  /** One helper inference, its answer valid against `outputSchema` (`ok: false` with a code when it fails); served
   * by a Perspectives room (`-32601` without one). */
  aiComplete(params: Params<"ai/complete">): Promise<Result<"ai/complete">> {
    return this.request("ai/complete", params);
  }

  /** A Perspectives room's runs (those called from `threadId`). */
  perspectivesRuns(threadId?: string): Promise<Result<"perspectives/runs">> {
    return this.request("perspectives/runs", threadId === undefined ? {} : { threadId });
  }

  /** Answer a pending request; `warning` also goes on its thread as a `provider/warning` event. */
  respond(
    requestId: string,
    answer: { result: unknown } | { error: { code: number; message: string } },
    warning?: string,
  ) {
    return this.request("interaction/respond", { requestId, ...answer, ...(warning === undefined ? {} : { warning }) });
  }

  // -- events --------------------------------------------------------------------------------------------------

  /** The thread's events after `afterSeq`, each once and in order, across reconnects. */
  async *events(threadId: string, afterSeq = 0): AsyncGenerator<ThreadEntry> {
    let last = afterSeq;
    for (;;) {
      const subscription = new Subscription(); // before the replay: nothing after its snapshot is missed
      const connection = this.connection;
      connection.subscriptions.add(subscription);
      try {
        const replay = await this.threadEvents(threadId, last);
        for (const entry of replay.events) {
          if (entry.seq > last) {
            last = entry.seq;
            yield { threadId, seq: entry.seq, event: entry.event as ThreadEntry["event"] };
          }
        }
        for (let note = await subscription.next(); note !== null; note = await subscription.next()) {
          if (note.method !== "thread/events" || note.params.threadId !== threadId) continue;
          for (const entry of note.params.events) {
            if (entry.seq > last) {
              last = entry.seq;
              yield { threadId, seq: entry.seq, event: entry.event as ThreadEntry["event"] };
            }
          }
        }
      } catch (error) {
        if (!(error instanceof Disconnected)) throw error;
      } finally {
        connection.subscriptions.delete(subscription);
      }
      if (!this.reconnects || this.closing) return;
      await this.reopen(connection);
    }
  }

  /** Drop the current connection, as a network failure would (`events` reconnects and resumes). */
  dropConnection(): void {
    this.connection.drop();
  }

  /** Close the connection (and end a spawned daemon); `events` iterators end. */
  close(): void {
    this.closing = true;
    this.connection.drop();
  }

  // -- the wire ------------------------------------------------------------------------------------------------

  private reopen(dropped: Connection): Promise<void> {
    if (this.connection !== dropped) return Promise.resolve(); // another iterator reconnected already
    this.reopening ??= this.retry().finally(() => (this.reopening = null));
    return this.reopening;
  }

  private async retry(): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        this.connection = await this.opener((transport) => new Connection(transport, (m) => this.onMessage(m)));
        await this.initialize();
        return;
      } catch (error) {
        if (attempt >= RETRIES) throw error;
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
      }
    }
  }

  private onMessage(message: Record<string, unknown>): void {
    if (!("id" in message)) {
      this.options.onNotification?.(message as unknown as Notification);
      return;
    }
    void this.answer(this.connection, message);
  }

  private async answer(connection: Connection, message: Record<string, unknown>): Promise<void> {
    const request = { method: message.method, params: message.params } as RelayedRequest;
    const handler = this.options.onRequest;
    try {
      const answer = handler === undefined ? LEAVE : await handler(request);
      if (answer !== LEAVE) connection.send({ jsonrpc: "2.0", id: message.id, result: answer });
    } catch (error) {
      // a failing handler answers with an error, which resolves the request (the bridge is told it failed)
      const text = error instanceof Error ? error.message : String(error);
      connection.send({ jsonrpc: "2.0", id: message.id, error: { code: -32603, message: text } });
    }
  }
}
