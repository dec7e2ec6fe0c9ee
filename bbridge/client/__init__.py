"""A Python client of the daemon's API (`clients/openrpc.json`), on anyio: it runs under trio and asyncio alike.

    async with Client.connect("/run/bbridge.sock", token=token) as client:
        await client.request("thread/start", {...})
        async for entry in client.events("thr_1"):          # resumes by itself after a dropped connection
            print(entry.seq, entry.event["type"])

* `Client.connect(path, token=...)` opens the Unix socket and sends `initialize`; `Client.connect(url, ...)`
  with a `ws://` or `wss://` URL (a `str`) reaches a `bbridge serve --listen` over WebSocket instead
  (`ca_file`: the certificates a `wss://` server's is checked against, else the system's; the token goes both
  as `Authorization: Bearer` on the upgrade and in `initialize`); `Client.spawn(argv)` runs `bbridge serve` (or
  anything speaking the API) on its stdio, its stderr this process's; `Client.over(stream)` talks to a daemon
  already connected on a byte stream (an in-process daemon's end of a socket pair). An error comes out of each block as
  itself, not in an exception group: `OSError` when nothing listens, `DaemonError` when `initialize` or the
  WebSocket upgrade is refused (`errors.UNAUTHORIZED`: a wrong or missing token) or a call inside the block is.
* Calls are typed with the daemon's own wire types (`bbridge.wire.client_api`): `initialize`, `status` (hidden
  threads with `include_hidden`), `thread_events`, `pending`, `respond`, `agent_configuration`, the usage ledger
  and budgets (`bbridge.wire.usage`): `usage_summary`, `budgets_check`, and the methods a Perspectives room serves
  (`bbridge.wire.perspectives`): `ai_complete`, `perspectives_runs`; any other method through `request`. A refusal is a `DaemonError`
  carrying the daemon's code (`bbridge.wire.errors`), its message and, in its text, the reason the error's
  `data` gives (a -32602's `[{path, message}]`); a call on a connection that has ended fails at once with
  `Disconnected`; an answer this client cannot read (a line over the daemon's own line bound, `max_line`) fails
  its call with `Unreadable`, and the connection goes on (`link`: the wire's framing, classification and
  correlation, as the daemon's side of the connection runs them).
* `turn/start` and `turn/steer` need a `clientRequestId` (`^creq_[23456789a-km-z]{10}$`; the events'
  `turn/input/accepted` carries it back): `request` mints one (`client_request_id()`) when the params leave it
  out. Mint it yourself to know which `turn/input/accepted` is your input's.
* `events(thread_id, after_seq=0)` yields a thread's events (`client_api.Entry`: `seq`, `event`) once each, in
  `seq` order: the journal's replay, then the live `thread/events`; when the connection drops (the daemon
  restarted, with `--journal`) it reconnects (bounded retries) and resumes after the last `seq` it yielded — no
  gap, no duplicate. `timelines({thread_id: after_seq, ...})` does so for several threads, as `(thread_id, entry)`.
* `notifications()` yields every notification of the current connection in the order the daemon sent them, from
  the connection's opening, until it closes (no reconnect), each a `Notice`: `method`, `params` typed
  (`client_api.ThreadEventsNotification`, `InteractionOpenedParams`, `Resolution`, ...) and `raw`, the params
  as sent. It reads the queue `events` reads: iterate one of them at a time.
* Relayed bridge requests (`interaction/request`, `item/tool/call`) go to `on_request`, whose return value
  is the answer; with none, or when the handler returns `LEAVE`, the request is not answered and stays pending
  for any client's `interaction/respond` (an error answer would resolve it).
"""

from __future__ import annotations

import contextlib
import math
import secrets
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream
from anyio.streams.stapled import StapledByteStream

from bbridge.client.link import Link, Notice, UnreadableAnswer
from bbridge.client.websocket import is_url, websocket_opener
from bbridge.wire import client_api as api
from bbridge.wire import errors
from bbridge.wire.agent_config import AgentConfiguration
from bbridge.wire.framing import MAX_LINE_BYTES
from bbridge.wire.jsonrpc import ConnectionClosed, Request, RpcError, encode_result
from bbridge.wire.perspectives import (
    AiCompleteError,
    AiCompleteOk,
    PerspectivesRunsResult,
    ai_complete_result,
)
from bbridge.wire.usage import BudgetsCheckResult, UsageGroup, UsageSummaryResult
from bbridge.wire.websocket import HandshakeError

__all__ = [
    "LEAVE",
    "Client",
    "DaemonError",
    "Disconnected",
    "Handler",
    "Notice",
    "Unreadable",
    "client_request_id",
    "error_reason",
    "is_url",
    "unreachable",
]

LEAVE = object()  # an `on_request` answer: not mine, leave it pending for another client
RETRIES = 50
RETRY_S = 0.1
REASON_MAX = 500  # characters of an error's `data` shown in its text
CLIENT_REQUEST_ID_ALPHABET = "23456789abcdefghijkmnpqrstuvwxyz"  # protocol.md §3.2: no 0, 1, l or o
MINTS_CLIENT_REQUEST_ID = ("turn/start", "turn/steer")  # the daemon methods whose params need one
Handler = Callable[[str, dict[str, Any]], Awaitable[Any]]
Opener = Callable[[], Awaitable[anyio.abc.ByteStream]]


def client_request_id() -> str:
    """A fresh `clientRequestId` for `turn/start` or `turn/steer`: `creq_` and 10 random characters of the
    protocol's alphabet (50 bits), the form the bridges refuse any other of (`-32602`)."""
    return "creq_" + "".join(secrets.choice(CLIENT_REQUEST_ID_ALPHABET) for _ in range(10))


def error_reason(data: Any) -> str:
    """A refusal's reason from its `data`, one line: a -32602's `[{path, message}]` issues (what the bridges'
    kit sends) as `path.to.field: message`, a string as itself, anything else as compact JSON."""
    if data is None:
        return ""
    if isinstance(data, list) and data and all(isinstance(issue, dict) and "message" in issue for issue in data):
        parts = []
        for issue in data:
            path = issue.get("path")
            dotted = ".".join(map(str, path)) if isinstance(path, list) else ""
            parts.append(f"{dotted}: {issue['message']}" if dotted else str(issue["message"]))
        text = "; ".join(parts)
    else:
        text = data if isinstance(data, str) else msgspec.json.encode(data).decode()
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


class DaemonError(Exception):
    """The daemon refused a request: its JSON-RPC error code, message and data; the text adds the reason `data`
    gives (`Invalid params for turn/start (-32602): clientRequestId: Expected ...`)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        reason = error_reason(data)
        super().__init__(f"{message} ({code})" + (f": {reason}" if reason else ""))
        self.code, self.message, self.data = code, message, data


class Disconnected(DaemonError):
    """The connection ended with the request outstanding."""

    def __init__(self, message: str = "the daemon closed the connection") -> None:
        super().__init__(-32099, message)


class Unreadable(DaemonError):
    """The request's answer could not be read (a line over `Client.max_line`, or not JSON) and was dropped; the
    request may have taken effect. The connection goes on."""


class Client:
    """One client of the daemon, alive inside `async with Client.connect(...)` (or `Client.spawn(...)`)."""

    # what `initialize` says this client is (the daemon names it in `interaction/resolved`): a subclass names itself
    client_info: ClassVar[dict[str, str]] = {"name": "bbridge.client", "version": "0.1.0"}
    # the longest line read from the daemon, the bound the daemon reads its clients' lines with
    max_line: ClassVar[int] = MAX_LINE_BYTES

    def __init__(
        self,
        group: anyio.abc.TaskGroup,
        opener: Opener,
        token: str | None,
        on_request: Handler | None,
        reconnects: bool,
    ) -> None:
        self._group, self._opener, self._token = group, opener, token
        self._on_request = on_request
        self._reconnects = reconnects
        self._link: Link | None = None
        self._notes: MemoryObjectReceiveStream[Notice] | None = None

    # -- opening ----------------------------------------------------------------------------------------------

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        where: str | Path,
        *,
        token: str | None = None,
        on_request: Handler | None = None,
        ca_file: str | Path | None = None,
    ) -> AsyncIterator[Client]:
        """The daemon on a Unix socket (a path), or at a `ws://` or `wss://` URL (a `str`: `bbridge serve
        --listen`, `/rpc` when the URL names no path); `events` reconnects to it when the connection drops."""
        url = isinstance(where, str) and is_url(where)
        if not url and ca_file is not None:
            raise ValueError(f"ca_file is for a wss:// URL, not the Unix socket {where}")
        opener = _websocket_opener(str(where), token, ca_file) if url else _socket_opener(Path(where))
        async with cls._session(opener, token, on_request, reconnects=True) as client:
            yield client

    @classmethod
    @contextlib.asynccontextmanager
    async def spawn(cls, argv: Sequence[str], *, on_request: Handler | None = None) -> AsyncIterator[Client]:
        """The daemon (`bbridge serve`) as a child on stdio; it ends when the client's block does. Its stderr
        (the daemon's logs) is this process's: a pipe nobody reads would fill and stall it."""
        process = await anyio.open_process(list(argv), stderr=None)
        assert process.stdin is not None and process.stdout is not None
        stream = StapledByteStream(process.stdin, process.stdout)

        async def opener() -> anyio.abc.ByteStream:
            return stream

        try:
            async with cls._session(opener, None, on_request, reconnects=False) as client:
                yield client
        finally:
            with anyio.CancelScope(shield=True):
                await process.aclose()

    @classmethod
    @contextlib.asynccontextmanager
    async def over(
        cls, stream: anyio.abc.ByteStream, *, token: str | None = None, on_request: Handler | None = None
    ) -> AsyncIterator[Client]:
        """A daemon already connected on `stream` (an in-process daemon's end of a socket pair, as `bbridge acp`
        runs it); the block ends with the connection, which is never reopened."""

        async def opener() -> anyio.abc.ByteStream:
            return stream

        async with cls._session(opener, token, on_request, reconnects=False) as client:
            yield client

    @classmethod
    @contextlib.asynccontextmanager
    async def _session(
        cls, opener: Opener, token: str | None, on_request: Handler | None, *, reconnects: bool
    ) -> AsyncIterator[Client]:
        failure: Exception | None = None
        try:
            async with anyio.create_task_group() as group:
                client = cls(group, opener, token, on_request, reconnects)
                await client._open()
                try:
                    yield client
                finally:
                    group.cancel_scope.cancel()
                    if client._link is not None:
                        with anyio.CancelScope(shield=True):
                            await client._link.stream.aclose()
        except BaseExceptionGroup as grouped:
            failure = _single(grouped)
            if failure is None:
                raise
        if failure is not None:
            raise failure  # the block's (or the connection's) one error, as itself

    async def _open(self) -> None:
        """A (new) connection: its reader in the client's task group, then `initialize`."""
        link = Link(await self._opener(), max_line=self.max_line)
        send, receive = anyio.create_memory_object_stream[Notice](math.inf)
        self._link, self._notes = link, receive
        self._group.start_soon(link.run, send, self._relayed)
        await self.initialize(self._token)

    # -- calls ------------------------------------------------------------------------------------------------

    async def request(self, method: str, params: Any = None) -> Any:
        """The result of one request; `DaemonError` with the daemon's code when it refuses. A `turn/start` or
        `turn/steer` without a `clientRequestId` gets a fresh one (the caller's params are not changed)."""
        if method in MINTS_CLIENT_REQUEST_ID and isinstance(params, dict) and params.get("clientRequestId") is None:
            params = {**params, "clientRequestId": client_request_id()}
        if self._link is None:
            raise Disconnected()
        try:
            result = await self._link.call(method, params or {})
        except ConnectionClosed:
            raise Disconnected() from None
        except UnreadableAnswer as exc:
            raise Unreadable(exc.code, f"{method}: {exc.message}") from None
        except RpcError as exc:
            raise DaemonError(exc.code, exc.message, exc.data) from None
        return msgspec.json.decode(result)

    async def initialize(self, token: str | None = None) -> api.DaemonInitializeResult:
        params: dict[str, Any] = {"client": dict(self.client_info), "protocolVersion": 1}
        if token is not None:
            params["token"] = token
        return msgspec.convert(await self.request("initialize", params), api.DaemonInitializeResult)

    async def status(self, *, include_hidden: bool = False) -> api.DaemonStatus:
        """`daemon/status`; with `include_hidden` the hidden threads' rows too (`hidden: true`, `runId`, `role`)."""
        params = {"includeHidden": True} if include_hidden else {}
        return msgspec.convert(await self.request("daemon/status", params), api.DaemonStatus)

    async def thread_events(self, thread_id: str, after_seq: int = 0) -> api.ThreadEventsResult:
        result = await self.request("thread/events", {"threadId": thread_id, "afterSeq": after_seq})
        return msgspec.convert(result, api.ThreadEventsResult)

    async def pending(self, thread_id: str | None = None) -> api.ThreadPendingResult:
        result = await self.request("thread/pending", {} if thread_id is None else {"threadId": thread_id})
        return msgspec.convert(result, api.ThreadPendingResult)

    async def agent_configuration(
        self,
        thread_id: str | None = None,
        *,
        cwd: str | None = None,
        provider_id: str | None = None,
        model: str | None = None,
    ) -> AgentConfiguration:
        """What `[[agents]]` resolves to for a thread, or for a context given outright (`cwd` and `provider_id`)."""
        given = {"threadId": thread_id, "cwd": cwd, "providerId": provider_id, "model": model}
        params = {key: value for key, value in given.items() if value is not None}
        return msgspec.convert(await self.request("agent/configuration", params), AgentConfiguration)

    async def usage_summary(
        self, group_by: Sequence[UsageGroup] = (), *, since: float | None = None, until: float | None = None
    ) -> UsageSummaryResult:
        """The usage ledger's booked turns summed by `group_by` (provider, model, thread, client, day, run), those
        booked in [`since`, `until`) (seconds since the epoch)."""
        params: dict[str, Any] = {"groupBy": list(group_by)}
        params |= {key: value for key, value in (("since", since), ("until", until)) if value is not None}
        return msgspec.convert(await self.request("usage/summary", params), UsageSummaryResult)

    async def budgets_check(
        self,
        *,
        thread_id: str | None = None,
        provider_id: str | None = None,
        model: str | None = None,
        run_id: str | None = None,
    ) -> BudgetsCheckResult:
        """The `[[budgets]]` as a `turn/start` with these keys meets them: a `DaemonError` with
        `errors.BUDGET_EXCEEDED` (its `data` the budget, spent and limit) when one refuses; an `ask` budget waits for
        its approval first."""
        given = {"threadId": thread_id, "providerId": provider_id, "model": model, "runId": run_id}
        params = {key: value for key, value in given.items() if value is not None}
        return msgspec.convert(await self.request("budgets/check", params), BudgetsCheckResult)

    async def ai_complete(
        self,
        prompt: str,
        output_schema: dict[str, Any],
        timeout_ms: int,
        *,
        provider_id: str | None = None,
        model: str | None = None,
        reasoning_level: str | None = None,
    ) -> AiCompleteOk | AiCompleteError:
        """One helper inference, its answer valid against `output_schema` (a failure is an `AiCompleteError`, not
        an exception); served by a Perspectives room (`-32601` without one)."""
        given = {"providerId": provider_id, "model": model, "reasoningLevel": reasoning_level}
        params = {"prompt": prompt, "outputSchema": output_schema, "timeoutMs": timeout_ms}
        params |= {key: value for key, value in given.items() if value is not None}
        return ai_complete_result(await self.request("ai/complete", params))

    async def perspectives_runs(self, thread_id: str | None = None) -> PerspectivesRunsResult:
        """A Perspectives room's runs (those called from `thread_id`)."""
        params = {} if thread_id is None else {"threadId": thread_id}
        return msgspec.convert(await self.request("perspectives/runs", params), PerspectivesRunsResult)

    async def respond(
        self, request_id: str, result: Any = None, *, error: tuple[int, str] | None = None, warning: str | None = None
    ) -> None:
        """Answer a pending request; `warning` also goes on its thread as a `provider/warning` event."""
        answer: dict[str, Any] = {"requestId": request_id}
        if error is not None:
            answer["error"] = {"code": error[0], "message": error[1]}
        else:
            answer["result"] = result
        if warning is not None:
            answer["warning"] = warning
        await self.request("interaction/respond", answer)

    # -- events -----------------------------------------------------------------------------------------------

    async def events(self, thread_id: str, after_seq: int = 0) -> AsyncIterator[api.Entry]:
        """The thread's events after `after_seq`, each once and in order, across reconnects."""
        async for _, entry in self.timelines({thread_id: after_seq}):
            yield entry

    async def timelines(self, after: Mapping[str, int]) -> AsyncIterator[tuple[str, api.Entry]]:
        """Several threads' events on this one connection, each thread's after its seq in `after`, as `(thread_id,
        entry)`: each event once and in order per thread, across reconnects (each thread replays from its last seq
        on the new connection, then follows live)."""
        last = dict(after)
        while True:
            try:
                async for entry in self._follow(last):
                    yield entry
            except (Disconnected, OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
            if not self._reconnects:
                return
            await _retry(self._open)

    async def notifications(self) -> AsyncIterator[Notice]:
        """Every notification of the current connection, in order, until it closes."""
        assert self._notes is not None
        async for note in self._notes:
            yield note

    async def _follow(self, last: dict[str, int]) -> AsyncIterator[tuple[str, api.Entry]]:
        """Replay, then follow live, the threads in `last`, advancing it past each event given."""
        for thread_id in list(last):
            replay = await self.thread_events(thread_id, last[thread_id])
            for entry in replay.events:
                if entry.seq > last[thread_id]:
                    last[thread_id] = entry.seq
                    yield thread_id, entry
        assert self._notes is not None
        async for note in self._notes:
            batch = note.params
            if not isinstance(batch, api.ThreadEventsNotification) or batch.threadId not in last:
                continue
            for entry in batch.events:
                if entry.seq > last[batch.threadId]:
                    last[batch.threadId] = entry.seq
                    yield batch.threadId, entry
        raise Disconnected()

    # -- the daemon's requests --------------------------------------------------------------------------------

    def _relayed(self, link: Link, request: Request) -> None:
        self._group.start_soon(self._answer, link, request)

    async def _answer(self, link: Link, request: Request) -> None:
        """`on_request`'s answer to a relayed request, on the connection it came by."""
        answer: Any = LEAVE
        if self._on_request is not None:
            params = msgspec.json.decode(request.params) if request.params else {}
            answer = await self._on_request(request.method, params if isinstance(params, dict) else {})
        if answer is LEAVE:
            return  # unanswered: pending for whoever answers it with interaction/respond
        with contextlib.suppress(ConnectionClosed):  # the daemon went away: it keeps the request pending
            await link.send(encode_result(request.id, answer))


def unreachable(where: str | Path, exc: OSError) -> str:
    """Why connecting to `where` failed, in one line; an untrusted TLS certificate says what to give."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the TLS certificate of {where} is not trusted ({exc.verify_message}): give its CA (--ca-file)"
    if exc.strerror is None and isinstance(exc.__cause__, OSError):  # anyio's "All connection attempts failed"
        exc = exc.__cause__
    return f"no daemon is listening on {where} ({exc.strerror or exc})"


def _socket_opener(path: Path) -> Opener:
    async def opener() -> anyio.abc.ByteStream:
        return await anyio.connect_unix(path)

    return opener


def _websocket_opener(url: str, token: str | None, ca_file: str | Path | None) -> Opener:
    """`websocket.websocket_opener`, a refused upgrade said as a `DaemonError` (`_refusal`)."""
    connect = websocket_opener(url, token, ca_file)

    async def opener() -> anyio.abc.ByteStream:
        try:
            return await connect()
        except HandshakeError as refused:
            raise _refusal(refused) from None

    return opener


UPGRADE_HINTS = {  # what a refused upgrade's error says to do, by its status
    401: "pass the token in the daemon's serve --token-file",
    403: "connect by the address the daemon listens on, or have it allow yours (serve --allow-host, --allow-origin)",
}


def _refusal(refused: HandshakeError) -> DaemonError:
    """401 and 403 are `UNAUTHORIZED`; anything else (503: too many connections, a close mid-handshake) a
    `Disconnected`, which a reconnect retries."""
    if refused.status in UPGRADE_HINTS:
        return DaemonError(errors.UNAUTHORIZED, f"{refused}; {UPGRADE_HINTS[refused.status]}")
    return Disconnected(f"{refused}; check the URL: bbridge serve --listen upgrades GET /rpc")


def _single(grouped: BaseExceptionGroup[BaseException]) -> Exception | None:
    """The task group's one error when it holds exactly one (not a cancellation, not a group of its own)."""
    if len(grouped.exceptions) != 1:
        return None
    only = grouped.exceptions[0]
    return only if isinstance(only, Exception) and not isinstance(only, BaseExceptionGroup) else None


async def _retry(open_: Callable[[], Awaitable[None]]) -> None:
    """Reconnect, bounded: `RETRIES` attempts `RETRY_S` apart (a daemon restarting takes a moment)."""
    for attempt in range(RETRIES):
        try:
            await open_()
            return
        except (OSError, Disconnected):
            if attempt == RETRIES - 1:
                raise
            await anyio.sleep(RETRY_S)
