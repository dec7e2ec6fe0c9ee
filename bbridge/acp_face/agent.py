"""`bbridge acp`: an ACP agent on stdio in front of a daemon, which it reaches only through the client API.

The editor's side is bbridge's own JSON-RPC (`rpc.Connection` on stdin/stdout: stdout carries the protocol only,
logs go to stderr); the daemon's side is a `bbridge.client.Client`, on a running daemon's socket or URL or on the
in-process daemon's end of a socket pair: one code path for both. One task (`_pump`) reads the daemon's
notifications in order and turns each session's thread events into `session/update`s (`updates`), and pending
approvals into `session/request_permission`s (`permissions`).
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any, ClassVar, Final, TypeVar

import msgspec
import structlog
import trio
from msgspec import UNSET

from bbridge.acp_face import messages as m
from bbridge.acp_face.index import BadCursor, Index, Record, page
from bbridge.acp_face.options import MODEL, PROVIDER, REASONING, Choice, config_options, select
from bbridge.acp_face.permissions import Permissions
from bbridge.acp_face.sessions import DEFAULT_MODE, MODES, Prompt, Session, new_thread_id
from bbridge.acp_face.updates import user_message
from bbridge.client import Client, DaemonError, client_request_id
from bbridge.wire import client_api as api
from bbridge.wire import rpc

log = structlog.get_logger("bbridge.acp_face")

INTERNAL_ERROR: Final = -32603
MODE: Final = "mode"
ECHO: Final = "echo"  # the daemon's built-in provider
T = TypeVar("T")


def decode(request: rpc.Request, kind: type[T]) -> T:
    """The request's params as `kind`, or the -32602 naming what is wrong."""
    try:
        return msgspec.json.decode(request.params or b"{}", type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise rpc.RpcError(rpc.INVALID_PARAMS, f"Invalid params for {request.method}: {exc}") from None


def refused(what: str, exc: DaemonError) -> rpc.RpcError:
    """A daemon refusal as the editor's error: what failed and the daemon's own words (which say what to do)."""
    return rpc.RpcError(INTERNAL_ERROR, f"{what}: {exc}", {"daemonCode": exc.code})


class Face:
    """The agent: the editor's connection, the daemon's client, the sessions."""

    def __init__(
        self,
        client: Client,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        index: Index,
        default_provider: str | None = None,
    ) -> None:
        self.client = client
        self.index = index
        self.default_provider = default_provider
        self.sessions: dict[str, Session] = {}
        self.conn = rpc.Connection(
            send, receive, name="acp", on_request=self._on_request, on_notifications=self._on_notifications,
            default_timeout=None,
        )  # fmt: skip
        self.permissions = Permissions(self.conn, client, self.sessions.get, self.send_update)
        self._nursery: trio.Nursery | None = None

    async def run(self) -> None:
        """Serve the editor until it closes stdin (or the daemon goes away)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.permissions.nursery = nursery
            nursery.start_soon(self._pump)
            await self.conn.run()
            nursery.cancel_scope.cancel()

    # -- the editor's requests ------------------------------------------------------------------------------

    async def _on_request(self, request: rpc.Request) -> Any:
        method = request.method
        if method == "initialize":
            return self._initialize(decode(request, m.InitializeParams))
        if method == "authenticate":
            return {}
        if method == "session/new":
            return await self._new(decode(request, m.NewSessionParams))
        if method == "session/load":
            return await self._load(decode(request, m.LoadSessionParams))
        if method == "session/list":
            return await self._list(decode(request, m.ListSessionsParams))
        if method == "session/set_config_option":
            return await self._set_option(decode(request, m.SetConfigOptionParams))
        if method == "session/prompt":
            return await self._prompt(decode(request, m.PromptParams))
        raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f"Method not found: {method}")

    async def _on_notifications(self, batch: list[rpc.Notification]) -> None:
        for note in batch:
            if note.method == "session/cancel" and note.params is not None:
                try:
                    params = msgspec.json.decode(note.params, type=m.SessionParams)
                except (msgspec.ValidationError, msgspec.DecodeError):
                    log.warning("ignored a session/cancel without a sessionId")
                    continue
                self._cancel(params.sessionId)

    def _initialize(self, params: m.InitializeParams) -> dict[str, Any]:
        self.permissions.client_name = params.clientInfo.name if params.clientInfo else "the editor"
        return {
            "protocolVersion": m.PROTOCOL_VERSION,
            "agentCapabilities": m.agent_capabilities(),
            "agentInfo": m.AGENT_INFO,
            "authMethods": [],
        }

    async def _new(self, params: m.NewSessionParams) -> dict[str, Any]:
        providers = await self._providers()
        wanted = self.default_provider if self.default_provider in providers else None
        if self.default_provider is not None and wanted is None:
            log.warning("[acp] default_provider is not a provider of the daemon", provider=self.default_provider,
                        providers=providers)  # fmt: skip
        configured = [p for p in providers if p != ECHO] or providers  # the built-in echo is the last resort
        session = Session(new_thread_id(), params.cwd, Choice(wanted or configured[0]))
        session.servers = await self._servers(params.mcpServers)
        await self._models(session)
        self.sessions[session.session_id] = session
        return {"sessionId": session.session_id, "configOptions": self._options(session, providers)}

    async def _load(self, params: m.LoadSessionParams) -> dict[str, Any]:
        thread_id = params.sessionId
        status = await self._status()
        row = next((t for t in status.threads if t.get("threadId") == thread_id), None)
        record = self.index.get(thread_id)
        if row is None:
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"session {thread_id}: the daemon has no such thread (a daemon "
                               "without --journal forgets its threads when it stops)")  # fmt: skip
        provider = row.get("providerId") or (record.providerId if record else None)
        if provider is None:
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"session {thread_id}: its provider is unknown (not a session "
                               "this face's index holds; give bbridge acp the --sessions file it was made with)")  # fmt: skip
        choice = Choice(provider, record.model if record else None, record.effort if record else None)
        session = Session(thread_id, params.cwd, choice, mode=(record.mode if record else None) or DEFAULT_MODE,
                          provider_thread_id=row.get("providerThreadId"), prompted=True,
                          constructed=bool(row.get("bridge") and row.get("providerThreadId")),
                          title=row.get("name") or (record.title if record else None))  # fmt: skip
        session.servers = await self._servers(params.mcpServers)
        await self._models(session)
        self.sessions[thread_id] = session  # live events are held from now until the replay is done
        held: list[api.Entry] = []
        session.held = held
        try:
            inputs = await self.client.request("thread/inputs", {"threadId": thread_id})
            said = {i["clientRequestId"]: i["input"] for i in inputs.get("inputs") or []}
            replay = await self.client.thread_events(thread_id, 0)
            for entry in replay.events:
                await self._replayed(session, entry.seq, entry.event, said)
        except DaemonError as exc:
            del self.sessions[thread_id]
            raise refused(f"session {thread_id}: reading its journal failed", exc) from None
        for live in held:
            await self._replayed(session, live.seq, live.event, said)
        session.held = None
        await self.permissions.reopen(thread_id)
        return {"configOptions": self._options(session, await self._providers())}

    async def _replayed(self, session: Session, seq: int, event: dict[str, Any], said: dict[str, Any]) -> None:
        if seq <= session.last_seq:
            return
        session.last_seq = seq
        if event.get("type") == "turn/input/accepted" and event.get("clientRequestId") in said:
            for update in user_message(said[event["clientRequestId"]]):
                await self.send_update(session.session_id, update)
        if event.get("providerThreadId") and session.provider_thread_id is None:
            session.provider_thread_id = event["providerThreadId"]
        for update in session.take(event):
            await self.send_update(session.session_id, update)

    async def _list(self, params: m.ListSessionsParams) -> dict[str, Any]:
        status = await self._status()
        threads = {t.get("threadId"): t for t in status.threads}
        shown = [r for r in self.index.all() if r.sessionId in threads and params.cwd in (None, r.cwd)]
        try:
            records, cursor = page(shown, params.cursor)
        except BadCursor as exc:
            raise rpc.RpcError(rpc.INVALID_PARAMS, str(exc)) from None
        listed = []
        for record in records:
            row = threads[record.sessionId]
            info: dict[str, Any] = {
                "sessionId": record.sessionId,
                "cwd": record.cwd,
                "updatedAt": iso(record.updatedAt),
            }
            title = row.get("name") or record.title
            if title:
                info["title"] = title
            listed.append(info)
        return {"sessions": listed} | ({"nextCursor": cursor} if cursor else {})

    async def _set_option(self, params: m.SetConfigOptionParams) -> dict[str, Any]:
        session = self._session(params.sessionId)
        value = params.value
        if not isinstance(value, str):
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"{params.configId}: expected one of the select's values")
        providers = await self._providers()
        choice = session.choice
        if params.configId == PROVIDER:
            if value not in providers:
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"provider {value!r}: not a provider of the daemon "
                                   f"({', '.join(providers)})")  # fmt: skip
            if value != choice.provider and session.prompted:
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"this session's thread runs on {choice.provider} since its "
                                   "first prompt; start a new session to use another provider")  # fmt: skip
            session.choice = Choice(value)
            await self._models(session)
        elif params.configId == MODEL:
            if value not in [str(model.get("id")) for model in choice.models]:
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"model {value!r}: not a model {choice.provider} lists")
            choice.model = value
            choice.settle()
        elif params.configId == REASONING:
            choice.effort = value
            choice.settle()
            if choice.effort != value:
                raise rpc.RpcError(
                    rpc.INVALID_PARAMS, f"reasoning {value!r}: the model {choice.model} has no such level"
                )
        elif params.configId == MODE:
            if value not in MODES:
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"mode {value!r}: expected one of {', '.join(MODES)}")
            session.mode = value
        else:
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"no config option {params.configId!r}")
        if session.prompted:
            self._remember(session)
        return {"configOptions": self._options(session, providers)}

    async def _prompt(self, params: m.PromptParams) -> dict[str, Any]:
        session = self._session(params.sessionId)
        inputs = m.turn_input(params.prompt)
        if not inputs:
            raise rpc.RpcError(rpc.INVALID_PARAMS, "the prompt has no text, file link or text resource to send")
        request_id = client_request_id()
        session.mine.add(request_id)
        running = session.prompt
        if running is not None:
            return await self._steer(session, running, inputs, request_id)
        await self._construct(session)
        prompt = session.prompt = Prompt({request_id})
        turn = {"providerId": session.choice.provider, "threadId": session.session_id, "input": inputs,
                "providerThreadId": session.provider_thread_id, "clientRequestId": request_id,
                "options": session.options()}  # fmt: skip
        if (trace := params.trace()) is not None:
            turn["_meta"] = trace
        try:
            await self.client.request("turn/start", turn)
        except DaemonError as exc:
            session.prompt = None
            prompt.lose(str(exc))  # a cancel waiting on its turn gives up
            raise refused("the turn did not start", exc) from None
        session.prompted = True
        session.name_from(" ".join(str(i.get("text", "")) for i in inputs))
        self._remember(session)
        await prompt.done.wait()
        return answer(prompt)

    async def _steer(
        self, session: Session, running: Prompt, inputs: list[dict[str, Any]], request_id: str
    ) -> dict[str, Any]:
        """A prompt while one runs: steered into the running turn, answered when that turn ends."""
        await running.accepted.wait()
        if running.turn_id is not None and not running.done.is_set():
            running.requests.add(request_id)
            steer = {"providerId": session.choice.provider, "threadId": session.session_id, "input": inputs,
                     "providerThreadId": session.provider_thread_id, "clientRequestId": request_id,
                     "expectedTurnId": running.turn_id, "options": session.options()}  # fmt: skip
            try:
                await self.client.request("turn/steer", steer)
            except DaemonError as exc:
                raise refused("the prompt could not join the running turn", exc) from None
        await running.done.wait()
        return answer(running)

    async def _construct(self, session: Session) -> None:
        """The thread's construction before its first turn: started, or resumed when loaded and not live."""
        if session.constructed:
            return
        options = session.options()
        if session.servers:
            options["tools"] = {"mcpServers": session.servers}
        params: dict[str, Any] = {"providerId": session.choice.provider, "threadId": session.session_id,
                                  "cwd": session.cwd, "options": options}  # fmt: skip
        method = "thread/start"
        if session.provider_thread_id is not None:
            method, params["providerThreadId"] = "thread/resume", session.provider_thread_id
        try:
            result = await self.client.request(method, params)
        except DaemonError as exc:
            raise refused(f"{method} on {session.choice.provider} failed", exc) from None
        session.provider_thread_id = (result or {}).get("providerThreadId") or session.provider_thread_id
        session.constructed = True

    def _cancel(self, session_id: str) -> None:
        session = self.sessions.get(session_id)
        prompt = session.prompt if session is not None else None
        if session is None or prompt is None or prompt.cancelled:
            return
        prompt.cancelled = True
        self.permissions.cancel_session(session_id)
        assert self._nursery is not None
        self._nursery.start_soon(self._stop, session, prompt)

    async def _stop(self, session: Session, prompt: Prompt) -> None:
        """`thread/stop` (interrupt) of the prompt's turn, once the turn is known."""
        await prompt.accepted.wait()
        if prompt.turn_id is None or prompt.done.is_set():
            return
        stop = {"providerId": session.choice.provider, "threadId": session.session_id, "intent": "interrupt",
                "providerThreadId": session.provider_thread_id, "activeTurnId": prompt.turn_id}  # fmt: skip
        try:
            await self.client.request("thread/stop", stop)
        except DaemonError as exc:
            log.warning("thread/stop for a cancel was refused", thread=session.session_id, error=str(exc))

    # -- the daemon's notifications -------------------------------------------------------------------------

    async def _pump(self) -> None:
        """The daemon's notifications in order: thread events to their session, interactions to `permissions`."""
        async for note in self.client.notifications():
            if isinstance(note.params, api.ThreadEventsNotification):
                session = self.sessions.get(note.params.threadId)
                if session is None:
                    continue
                for entry in note.params.events:
                    if session.held is not None:
                        session.held.append(entry)
                    elif entry.seq > session.last_seq:
                        session.last_seq = entry.seq
                        for update in session.take(entry.event):
                            await self.send_update(session.session_id, update)
            elif note.method == "thread/input":
                await self._foreign_input(note.raw)
            elif note.method == "interaction/opened":
                self.permissions.opened(note.raw)
            elif note.method == "interaction/resolved":
                self.permissions.resolved(note.raw)
        for session in self.sessions.values():
            if session.prompt is not None:
                session.prompt.lose("the daemon closed the connection; the turn's end is unknown")
        log.warning("the daemon closed the connection")
        await self.conn.aclose()

    async def _foreign_input(self, params: dict[str, Any]) -> None:
        """Another client's input to a session's thread (a page's turn or steer) shows as the user's message."""
        session = self.sessions.get(str(params.get("threadId")))
        if session is None or session.held is not None or params.get("clientRequestId") in session.mine:
            return
        for update in user_message(params.get("input") or []):
            await self.send_update(session.session_id, update)

    async def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        await self.conn.notify("session/update", {"sessionId": session_id, "update": update})  # a gone editor: dropped

    # -- helpers ---------------------------------------------------------------------------------------------

    def _session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"no session {session_id!r} (session/new or session/load it)")
        return session

    async def _servers(self, servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The editor's MCP servers the daemon will start for the session's thread (its tool host offers their tools
        to whatever agent runs it), or none, saying why, when the daemon does not take a client's servers."""
        if not servers:
            return []
        kept, skipped = m.thread_servers(servers)
        if skipped:
            log.warning("only stdio MCP servers can be offered to the agent; left out", servers=skipped)
        hosted = (await self._status()).hostedTools
        if kept and (hosted is UNSET or not hosted.clientMcpServers):
            log.warning("the daemon does not start a client's MCP servers (serve --allow-client-mcp-servers); the "
                        "session's are left out", servers=[server["name"] for server in kept])  # fmt: skip
            return []
        return kept

    async def _status(self) -> Any:
        try:
            return await self.client.status()
        except DaemonError as exc:
            raise refused("daemon/status failed", exc) from None

    async def _providers(self) -> list[str]:
        providers = [str(p.get("providerId")) for p in (await self._status()).providers]
        if not providers:
            raise rpc.RpcError(INTERNAL_ERROR, "the daemon serves no provider: configure one in bbridge.toml")
        return providers

    async def _models(self, session: Session) -> None:
        """The chosen provider's models (`model/list`), or none when it lists none or refuses."""
        choice = session.choice
        try:
            listed = await self.client.request("model/list", {"providerId": choice.provider, "cwd": session.cwd})
            choice.models = [dict(model) for model in (listed or {}).get("models") or []]
        except DaemonError as exc:
            log.info("the provider lists no models", provider=choice.provider, reason=str(exc))
            choice.models = []
        choice.settle()

    def _options(self, session: Session, providers: list[str]) -> list[dict[str, Any]]:
        modes = [{"value": mode, "name": mode} for mode in MODES]
        mode = select(MODE, "Permissions", "mode", session.mode, modes, "What the agent may do without asking")
        return [*config_options(providers, session.choice), mode]

    def _remember(self, session: Session) -> None:
        choice = session.choice
        session.updated_at = time.time()
        self.index.put(Record(sessionId=session.session_id, cwd=session.cwd, providerId=choice.provider,
                              model=choice.model, effort=choice.effort, mode=session.mode, title=session.title,
                              updatedAt=session.updated_at))  # fmt: skip


def answer(prompt: Prompt) -> dict[str, Any]:
    if prompt.stop is None:
        raise rpc.RpcError(INTERNAL_ERROR, prompt.failure or "the turn failed")
    return {"stopReason": prompt.stop}


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat().replace("+00:00", "Z")


class AcpClient(Client):
    """The daemon's client as `bbridge acp` (the name `interaction/resolved` gives an answer it sent)."""

    client_info: ClassVar[dict[str, str]] = {"name": "bbridge-acp", "version": m.AGENT_INFO["version"]}


async def serve_stdio(client: Client, index: Index, default_provider: str | None) -> None:
    """The agent on this process's stdin and stdout, until the editor closes stdin."""
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    await Face(client, stdout, stdin, index, default_provider).run()
