"""Write a provider bridge in Python (daemon.md §8): the plumbing every bridge needs, so its code is only the provider.

* `Bridge`: JSON-RPC on the process's own stdin/stdout with stdout guarded
  (fd 1 is pointed at stderr, so a stray `print()`, a logger or an inherited
  child stdout cannot corrupt the protocol), method dispatch with typed params
  (-32601 for unknown methods, -32602 with `[{path, message}]` issues, worded per bridge by `Wording`), the
  `initialize` answer with grammar negotiation, and session openings that meet
  the §4.2 obligations.
* `emit`: deltas are the `bbridge.core.grammar` Structs; every batch is validated by
  the same decoder the daemon uses before it is written, so an invalid delta is
  a `DeltaError` in the bridge instead of a silently dropped notification
  (`delta_encoder`: `encode_deltas`, and `DeltaEncoder` for a bridge whose reference
  wrote some members in another order).
* `UsageMeter`: per-turn providers sum usage in the bridge (assembler.md §11.1).
* The provider's processes (`bbridge.kit.child`): `Child`, the agent child every
  bridge runs (own process group, record-mode tee on the provider lanes,
  protocol.md §5.3, §5.5, stderr tail, line framing, stop), and `run_once`
  for probes; `record_child_io` and `env_without_runtime` are re-exported here.

Grammar negotiation (§2.4, §11.11): the kit emits grammar v3 only. It answers
the highest version in both its range and the params' `grammarVersions`. When
the params *state* a range that misses ours, `initialize` fails with -32000
naming both ranges; when they omit it (legacy `[2, 2]`, e.g. the parity
harness) the kit answers anyway, as the reference bridges do, and lets the
runtime's own check decide.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec
import structlog
import trio
from msgspec import UNSET

from bbridge import logs
from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.kit.child import RUNTIME_ONLY_ENV as RUNTIME_ONLY_ENV  # public API
from bbridge.kit.child import env_without_runtime as env_without_runtime  # public API
from bbridge.kit.child import process_recorder as process_recorder  # public API
from bbridge.kit.child import record_child_io as record_child_io  # public API
from bbridge.kit.delta_encoder import DeltaEncoder as DeltaEncoder  # the public API: `from bbridge.kit import ...`
from bbridge.kit.delta_encoder import DeltaError as DeltaError
from bbridge.kit.delta_encoder import encode_deltas as encode_deltas
from bbridge.wire import protocol, rpc

log = structlog.get_logger("bbridge.kit")

P = TypeVar("P")
Handler = Callable[[P], Awaitable[Any]]

# -- deltas (`encode_deltas`, `DeltaEncoder`: `delta_encoder.py`) ------------


_TOKEN_FIELDS = ("totalTokens", "inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens")


def tokens(
    input: float = 0, output: float = 0, *, cached_input: float = 0, reasoning_output: float = 0
) -> g.TokenBreakdown:
    """A token breakdown whose total is input + output (cached and reasoning tokens are parts of those)."""
    return g.TokenBreakdown(
        totalTokens=input + output,
        inputTokens=input,
        cachedInputTokens=cached_input,
        outputTokens=output,
        reasoningOutputTokens=reasoning_output,
    )


class UsageMeter:
    """Running token usage of one provider session, for providers that report each turn on its own."""

    def __init__(self) -> None:
        self.total = tokens()

    def turn(
        self,
        last: g.TokenBreakdown,
        *,
        model_context_window: float | None = None,
        provider_turn_id: str | None = None,
    ) -> g.Usage:
        """Add one turn's usage; the `usage` delta carries the new running total and the turn's own `last`."""
        self.total = g.TokenBreakdown(**{f: getattr(self.total, f) + getattr(last, f) for f in _TOKEN_FIELDS})
        return g.Usage(
            total=self.total,
            last=last,
            modelContextWindow=model_context_window,
            providerTurnId=UNSET if provider_turn_id is None else provider_turn_id,
        )


# -- prompts -------------------------------------------------------------------


def _utf16_slice(text: str, start: int, end: int) -> str:
    data = text.encode("utf-16-le", "surrogatepass")
    return data[start * 2 : end * 2].decode("utf-16-le", "surrogatepass")


def is_standalone_compact(inputs: list[dict[str, Any]]) -> bool:
    """A prompt that is only the builtin `/compact` command (the domain rule every bridge applies): the input is
    all text, exactly one mention is the builtin `/compact` command and reads `/compact`, and nothing but blanks
    remains once it is removed. Bridges run it as their provider's compaction instead of a turn."""
    if not inputs or any(entry.get("type") != "text" for entry in inputs):
        return False
    found: list[tuple[int, dict[str, Any]]] = []
    for index, entry in enumerate(inputs):
        for mention in entry.get("mentions") or []:
            resource = mention.get("resource") if isinstance(mention, dict) else None
            if (
                isinstance(resource, dict)
                and resource.get("kind") == "command"
                and resource.get("trigger") == "/"
                and resource.get("name") == "compact"
            ):
                found.append((index, mention))
    if len(found) != 1:
        return False
    index, mention = found[0]
    resource = mention["resource"]
    if resource.get("source") != "command" or resource.get("origin") != "builtin":
        return False
    start, end, text = mention.get("start"), mention.get("end"), inputs[index].get("text", "")
    if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= g.utf16_len(text)):
        return False
    if _utf16_slice(text, start, end) != "/compact":
        return False
    rest = _utf16_slice(text, end, g.utf16_len(text))
    rest = rest[1:] if rest.startswith(" ") else rest
    remaining = [_utf16_slice(text, 0, start) + rest if i == index else e.get("text", "") for i, e in enumerate(inputs)]
    return all(not js.trim(part) for part in remaining)


# -- the bridge ----------------------------------------------------------------


@dataclass(frozen=True)
class Wording:
    """How a bridge words its -32601 / -32602 answers: each reference bridge has its own text, so it is one choice
    per bridge. `{method}` and `{issues}` are filled in; the default is the echo bridges' wording.

    `{issues}` is `path.joined.by.dots: message` (the bare message at the root), each path after
    `issue_path_prefix`; `issues_as_data` also sends them as the error's `data` (`[{path, message}]`).
    """

    unknown_method: str = "Method not found: {method}"
    invalid_params: str = "Invalid params for {method}"
    issue_path_prefix: str = ""
    issues_as_data: bool = True

    def unknown(self, method: str) -> rpc.RpcError:
        return rpc.RpcError(rpc.METHOD_NOT_FOUND, self.unknown_method.format(method=method))

    def invalid(self, method: str, exc: msgspec.ValidationError | msgspec.DecodeError) -> rpc.RpcError:
        path, message = protocol.first_issue(exc)
        dotted = ".".join(map(str, path))
        issues = f"{self.issue_path_prefix}{dotted}: {message}" if path else message
        data = [{"path": path, "message": message}] if self.issues_as_data else None
        return rpc.RpcError(rpc.INVALID_PARAMS, self.invalid_params.format(method=method, issues=issues), data)


def claim_stdio() -> tuple[int, int]:
    """Take fds 0/1 for the protocol and return private copies; fd 1 then writes to stderr, fd 0 reads /dev/null.

    Everything that writes to stdout — `print`, loggers bound to the original `sys.stdout`, C code, and children
    that inherit it — lands on stderr, and children cannot consume the runtime's requests.
    """
    sys.stdout.flush()
    protocol_in, protocol_out = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr
    return protocol_in, protocol_out


class SessionHandlers(Protocol):
    """The session methods (§3.3) a full bridge serves; `Bridge.handle_sessions` registers them all at once."""

    async def model_list(self, params: protocol.ModelListParams) -> Any: ...
    async def thread_start(self, params: protocol.ThreadStartParams) -> Any: ...
    async def thread_resume(self, params: protocol.ThreadResumeParams) -> Any: ...
    async def thread_fork(self, params: protocol.ThreadForkParams) -> Any: ...
    async def turn_start(self, params: protocol.TurnStartParams) -> Any: ...
    async def turn_steer(self, params: protocol.TurnSteerParams) -> Any: ...
    async def thread_stop(self, params: protocol.ThreadStopParams) -> Any: ...
    async def thread_discard(self, params: protocol.ThreadRefParams) -> Any: ...


class MaintenanceHandlers(Protocol):
    """The host probes (§3.3.2–§3.3.4) a bridge for an installed CLI serves; `Bridge.handle_maintenance`."""

    async def health(self, params: protocol.MaintenanceParams) -> Any: ...
    async def usage(self, params: protocol.MaintenanceParams) -> Any: ...
    async def installation_status(self, params: protocol.InstallationStatusParams) -> Any: ...
    async def installation_run(self, params: protocol.InstallationRunParams) -> Any: ...


class Bridge:
    """A provider bridge: register handlers with `method`, then `run()` (or `serve` over given streams)."""

    def __init__(
        self,
        name: str,
        capabilities: protocol.Capabilities | None = None,
        *,
        wording: Wording = Wording(),
        log_prefix: str | None = None,
    ) -> None:
        """`log_prefix` makes every stderr diagnostic one plain `<prefix><message>` line (see `logs.configure`)."""
        self.name = name
        self.wording = wording
        self.log_prefix = log_prefix
        caps = capabilities if capabilities is not None else protocol.Capabilities()
        # the kit validates against the grammar it ships, so that is the range it can honour
        self.capabilities = msgspec.structs.replace(caps, grammarVersions=g.GRAMMAR_VERSIONS)
        self.grammar_version: int | None = None  # negotiated by `initialize`
        self._methods: dict[str, tuple[Any, Handler[Any]]] = {}
        self._meters: dict[str, UsageMeter] = {}
        self._conn: rpc.Connection | None = None
        self._nursery: trio.Nursery | None = None
        self.method("initialize", protocol.InitializeParams)(self._initialize)

    def method(self, name: str, params: type[P]) -> Callable[[Handler[P]], Handler[P]]:
        """Decorator: handle requests for `name` with params decoded into `params` (absent params read as {})."""

        def register(handler: Handler[P]) -> Handler[P]:
            self._methods[name] = (params, handler)
            return handler

        return register

    def handle_sessions(self, handlers: SessionHandlers) -> None:
        """Register every session method with its params type, so each bridge spells the table once (here)."""
        self.method("model/list", protocol.ModelListParams)(handlers.model_list)
        self.method("thread/start", protocol.ThreadStartParams)(handlers.thread_start)
        self.method("thread/resume", protocol.ThreadResumeParams)(handlers.thread_resume)
        self.method("thread/fork", protocol.ThreadForkParams)(handlers.thread_fork)
        self.method("turn/start", protocol.TurnStartParams)(handlers.turn_start)
        self.method("turn/steer", protocol.TurnSteerParams)(handlers.turn_steer)
        self.method("thread/stop", protocol.ThreadStopParams)(handlers.thread_stop)
        self.method("thread/discard", protocol.ThreadRefParams)(handlers.thread_discard)

    def handle_maintenance(self, handlers: MaintenanceHandlers) -> None:
        """Register the four maintenance methods with their params types."""
        self.method("provider/health", protocol.MaintenanceParams)(handlers.health)
        self.method("provider/usage", protocol.MaintenanceParams)(handlers.usage)
        self.method("provider/installation/status", protocol.InstallationStatusParams)(handlers.installation_status)
        self.method("provider/installation/run", protocol.InstallationRunParams)(handlers.installation_run)

    # -- talking to the runtime ----------------------------------------------

    @property
    def conn(self) -> rpc.Connection:
        if self._conn is None:
            raise RuntimeError(f"bridge {self.name!r} is not serving")
        return self._conn

    async def emit(self, thread_id: str, deltas: Sequence[g.Delta]) -> None:
        """One `thread/delta` notification; raises `DeltaError` (and sends nothing) if any delta is invalid."""
        await self.conn.notify("thread/delta", msgspec.Raw(encode_deltas(thread_id, deltas)))

    async def open_session(
        self, thread_id: str, provider_thread_id: str, *, session_restorable: bool | None = None
    ) -> None:
        """A new provider session for a thread (§4.2): identity, then `session.reset`, usage zeroed.

        Settle the old session's open work before calling this.
        """
        batch = encode_deltas(thread_id, [g.SessionReset()])
        identity = protocol.ThreadIdentityParams(
            threadId=thread_id,
            providerThreadId=provider_thread_id,
            sessionRestorable=UNSET if session_restorable is None else session_restorable,
        )
        self._meters[thread_id] = UsageMeter()
        await self.conn.send_lines(
            [
                rpc.encode_notification("thread/identity", identity),
                rpc.encode_notification("thread/delta", msgspec.Raw(batch)),
            ]
        )

    def usage(self, thread_id: str) -> UsageMeter:
        """The thread's running usage (restarted by `open_session`)."""
        return self._meters.setdefault(thread_id, UsageMeter())

    def forget(self, thread_id: str) -> None:
        """Drop per-thread kit state (usage) when a session is released."""
        self._meters.pop(thread_id, None)

    async def notify(self, method: str, params: Any = None) -> None:
        await self.conn.notify(method, params)

    async def request(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """A bridge→runtime request (`item/tool/call`, `interaction/request`); no timeout by default (users answer)."""
        return await self.conn.request(method, params, timeout=timeout)

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run work that outlives its request (a streaming turn); cancelled when the runtime goes away."""
        if self._nursery is None:
            raise RuntimeError(f"bridge {self.name!r} is not serving")
        self._nursery.start_soon(fn, *args)

    # -- serving -------------------------------------------------------------

    async def serve(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> None:
        """Serve the runtime until it closes our input: in-flight requests are answered, spawned work cancelled."""
        conn = rpc.Connection(
            send,
            receive,
            name=self.name,
            on_request=self._dispatch,
            on_junk=self._on_junk,
            answer_junk=True,
            default_timeout=None,
            encode_request=rpc.encode_bridge_request,
        )
        self._conn = conn
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await conn.run(drain=True)
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            self._conn = None

    def run(self) -> None:
        """The process entry point: guarded stdio, logs on stderr, SIGTERM/SIGINT end the bridge cleanly."""
        logs.configure(prefix=self.log_prefix)
        protocol_in, protocol_out = claim_stdio()
        try:
            trio.run(self._main, protocol_in, protocol_out)
        finally:
            recorder = process_recorder()
            if recorder is not None:
                recorder.close()

    async def _main(self, protocol_in: int, protocol_out: int) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with (
                trio.lowlevel.FdStream(protocol_in) as receive,
                trio.lowlevel.FdStream(protocol_out) as send,
                trio.open_nursery() as nursery,
            ):

                async def stop_on_signal() -> None:
                    async for signum in signals:
                        log.info("bridge stopping", bridge=self.name, signal=signal.Signals(signum).name)
                        nursery.cancel_scope.cancel()

                nursery.start_soon(stop_on_signal)
                await self.serve(send, receive)
                nursery.cancel_scope.cancel()

    async def _dispatch(self, request: rpc.Request) -> Any:
        entry = self._methods.get(request.method)
        if entry is None:
            error = self.wording.unknown(request.method)
            log.warning(error.message)
            raise error
        params_type, handler = entry
        try:
            params = msgspec.json.decode(request.params or b"{}", type=params_type)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            error = self.wording.invalid(request.method, exc)
            log.warning(error.message)
            raise error from None
        return await handler(params)

    def _on_junk(self, line: bytes, reason: str) -> None:
        if line:
            log.debug("ignored a non-protocol line", bridge=self.name, reason=reason)
        else:  # an oversized line
            log.warning("Discarded an oversized JSON-RPC line from the runtime", bridge=self.name, reason=reason)

    async def _initialize(self, params: protocol.InitializeParams) -> protocol.InitializeResult:
        ours = self.capabilities.grammarVersions
        asked = params.grammarVersions
        version = protocol.negotiate(ours, protocol.LEGACY_GRAMMAR_RANGE if asked is UNSET else asked)
        if version is None and asked is not UNSET:
            raise rpc.RpcError(
                rpc.BRIDGE_ERROR,
                f'Bridge "{self.name}" emits thread/delta grammar versions {ours[0]}-{ours[1]}, but the runtime '
                f"assembles versions {asked[0]}-{asked[1]}; no version is in both ranges.",
                {"bridgeGrammarVersions": list(ours), "runtimeGrammarVersions": list(asked)},
            )
        self.grammar_version = ours[1] if version is None else version
        return protocol.InitializeResult(protocolVersion=protocol.PROTOCOL_VERSION, capabilities=self.capabilities)
