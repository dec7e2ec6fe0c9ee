"""The daemon: routes client requests to bridges and bridge output to clients (daemon.md).

This module is the daemon's core: its state, bridge processes and their lifecycle, and client requests, which
flow to bridges with the daemon's translations (bb↔provider turn ids) and capability gating; what each forwarded
method does before and after is its rule in `methods.py`, and every thread's record is in `threads.py`. Its other
concerns are mixins of `Daemon`: bridge output to clients (`delivery.py`), bridge requests held as pending thread
state (`relays.py`), the live view (`status.py`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import structlog
import trio

from bbridge.core.events import Event
from bbridge.daemon.base import CLIENT_PROTOCOL_VERSION, DAEMON_INFO, ClientSink, Counters, TurnDurations
from bbridge.daemon.bridge import BridgeProcess, ExitStatus
from bbridge.daemon.config import ConfigReport, ProviderConfig
from bbridge.daemon.declared_tools import CHECK_DEADLINE_S, MAX_ARGUMENT_BYTES, Checker, Declarations
from bbridge.daemon.delivery import DeliveryMixin
from bbridge.daemon.extensions import ExtensionChecker
from bbridge.daemon.hosted import HostedTools
from bbridge.daemon.hosting import ToolHost
from bbridge.daemon.inputs import Inputs
from bbridge.daemon.journal import Journal, entries_json
from bbridge.daemon.methods import DAEMON_MADE, FORWARDED, METHODS, Call
from bbridge.daemon.mistakes import Mistakes
from bbridge.daemon.pending import Interactions
from bbridge.daemon.relays import RelayMixin
from bbridge.daemon.status import StatusMixin
from bbridge.daemon.threads import Cause, ThreadRegistry
from bbridge.daemon.tracker import Tracker
from bbridge.wire import client_api, errors, protocol, rpc
from bbridge.wire.redact import Pattern

__all__ = ["CLIENT_PROTOCOL_VERSION", "DAEMON_INFO", "FORWARDED", "OWN_METHODS", "ClientSink", "Counters", "Daemon"]

log = structlog.get_logger("bbridge.daemon.router")

DEFAULT_TIMEOUT_S = 30.0
SHUTDOWN_STOP_TIMEOUT_S = 5.0


class Daemon(DeliveryMixin, RelayMixin, StatusMixin):
    def __init__(
        self,
        providers: dict[str, ProviderConfig],
        *,
        journal: Journal | None = None,
        record_dir: Path | None = None,
        record_redactions: Sequence[Pattern] = (),
        token: str | None = None,
        text_delta_flush_ms: float = 100,
        entropy_prefix: str | None = None,
        request_timeout_s: float = DEFAULT_TIMEOUT_S,
        open_extensions: bool = False,
        config: ConfigReport | None = None,
        tool_check_deadline_s: float = CHECK_DEADLINE_S,
        max_tool_argument_bytes: int = MAX_ARGUMENT_BYTES,
        tool_host: ToolHost | None = None,
    ) -> None:
        self.providers = providers
        self.config = config or ConfigReport()  # the file and its refused entries, for `daemon/status`
        self.entropy_prefix = entropy_prefix
        self.request_timeout_s = request_timeout_s
        self.journal = journal or Journal()
        self.record_dir = record_dir
        self.record_redactions = list(record_redactions)  # what every lane of the recording is redacted with
        self.token = token
        self.text_delta_flush_ms = text_delta_flush_ms
        self.counters = Counters()
        self.turn_durations = TurnDurations()  # per provider, for `daemon/status` and the listener's /metrics
        self.tracker = Tracker()
        self.mistakes = Mistakes()  # each thread's latest bridge mistakes, worded with its keys (daemon/status)
        self.bridges: dict[str, BridgeProcess] = {}
        self.start_failures: dict[str, str] = {}
        self.registry = ThreadRegistry(self.tracker, tool_host)  # every thread's record (where it is let go)
        self.hosted = HostedTools(tool_host)  # the tools the daemon hosts (None: none), offered to constructions
        self.declarations = Declarations()  # checks a construction's dynamicTools (the record keeps them)
        self.checker = Checker(deadline_s=tool_check_deadline_s, max_argument_bytes=max_tool_argument_bytes)
        self.clients: list[ClientSink] = []
        self.client_info: dict[ClientSink, dict[str, str]] = {}  # what each client called itself in initialize
        self.clients_changed = trio.Event()  # replaced (after being set) whenever a client comes or goes
        self.interactions = Interactions(self._broadcast, self.registry, self.journal.directory)
        self.inputs = Inputs(self._broadcast, self.journal.directory)  # what clients asked of each thread
        self.read_names()  # a journaled thread's name, after a restart
        self.extensions = {
            pid: ExtensionChecker(pid, cfg.extension_kinds, allow_undeclared=open_extensions)
            for pid, cfg in providers.items()
        }
        self.shutdown_requested = trio.Event()
        self.stopped = trio.Event()
        self._starting: dict[str, trio.Lock] = {}
        self._flush_wake = trio.Event()
        self._flusher_idle = False  # the flusher waits for `_flush_wake`: no bridge has a flush queued
        self._nursery: trio.Nursery | None = None
        self._started_at = time.time()

    # -- running -------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Owns the bridges; returns after `shutdown` has stopped them all."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.text_delta_flush_ms > 0:
                nursery.start_soon(self.flusher)
            task_status.started()
            await self.shutdown_requested.wait()
            await self._stop_bridges()
            await self.checker.aclose()
            nursery.cancel_scope.cancel()
        self.journal.close()
        self.stopped.set()

    def request_shutdown(self) -> None:
        self.shutdown_requested.set()

    async def _stop_bridges(self) -> None:
        async with trio.open_nursery() as nursery:
            for bridge in list(self.bridges.values()):
                nursery.start_soon(self._stop_bridge, bridge)

    async def _stop_bridge(self, bridge: BridgeProcess) -> None:
        """Interrupt live turns (the bridge settles them), then terminate the process."""
        if bridge.state == "ready":
            for thread_id in list(bridge.threads):
                turns = self.tracker.open_turns(thread_id)
                if not turns:
                    continue
                params = {
                    "threadId": thread_id,
                    "providerThreadId": self.registry.provider_threads.get(thread_id),
                    "intent": "interrupt",
                    "activeTurnId": bridge.assembler.get_provider_turn_id(thread_id, turns[0]) or turns[0],
                }
                try:
                    await bridge.request("thread/stop", params, SHUTDOWN_STOP_TIMEOUT_S)
                except rpc.RpcError as exc:
                    log.warning(
                        "interrupt at shutdown failed",
                        providerId=bridge.provider_id,
                        threadId=thread_id,
                        error=exc.message,
                    )
        await bridge.terminate(kill_grace=0)

    # -- bridges -------------------------------------------------------------

    async def bridge(self, provider_id: str) -> BridgeProcess:
        """The provider's ready bridge, spawned and handshaken on first use."""
        config = self.providers.get(provider_id)
        if config is None:
            raise rpc.RpcError(errors.UNKNOWN_PROVIDER, self._unknown_provider(provider_id))
        if self.shutdown_requested.is_set():
            raise rpc.RpcError(errors.SHUTTING_DOWN, "The daemon is shutting down")
        lock = self._starting.setdefault(provider_id, trio.Lock())
        async with lock:
            current = self.bridges.get(provider_id)
            if current is not None and current.state == "ready":
                return current
            assert self._nursery is not None
            bridge = BridgeProcess(
                provider_id,
                config,
                self,
                record_dir=self.record_dir,
                redactions=self.record_redactions,
                text_delta_flush_ms=self.text_delta_flush_ms,
                entropy_prefix=self.entropy_prefix,
            )
            self.bridges[provider_id] = bridge
            try:
                await bridge.start(self._nursery)
            except rpc.RpcError as exc:
                if self.bridges.get(provider_id) is bridge:
                    del self.bridges[provider_id]
                self.start_failures[provider_id] = bridge.reason or exc.message  # status: `failed: <reason>`
                raise
            self.start_failures.pop(provider_id, None)
            return bridge

    def _unknown_provider(self, provider_id: str) -> str:
        """Why a request names no provider: the configuration refused its section (each refusal line), or the
        name is not configured at all."""
        section = f"providers.{provider_id}"
        refusals = [refusal.line() for refusal in self.config.refused if refusal.section == section]
        if refusals:
            return (
                f"Provider {provider_id!r} was refused by the configuration ({self.config.path}): "
                f"{'; '.join(refusals)}. Fix the entry and restart the daemon (`bbridge config check` lists every "
                "refused entry)"
            )
        return f"Unknown provider {provider_id!r} (configured: {', '.join(sorted(self.providers))})"

    def on_status(self, bridge: BridgeProcess) -> None:
        params: dict[str, Any] = {"providerId": bridge.provider_id, "state": bridge.state, "pid": bridge.pid}
        if bridge.exit is not None:
            if bridge.exit.code is not None:
                params["exitCode"] = bridge.exit.code
            if bridge.exit.signal is not None:
                params["signal"] = bridge.exit.signal
        if bridge.reason:
            params["reason"] = bridge.reason
        self._broadcast([rpc.encode_notification("bridge/status", params)])

    async def on_exit(self, bridge: BridgeProcess, status: ExitStatus) -> None:
        if self.bridges.get(bridge.provider_id) is bridge:
            del self.bridges[bridge.provider_id]
        self.resolve_provider(bridge.provider_id, f"provider {bridge.provider_id!r} exited")
        verb = "stopped" if bridge.stopping else "exited unexpectedly"
        tail = bridge.stderr_tail.strip()
        message = f"Provider {bridge.provider_id!r} {verb} ({status.describe()})" + (
            f"\nstderr: {tail}" if tail else ""
        )
        for thread_id in list(self.registry.of_bridge(bridge)):
            events = self.registry.release(thread_id, bridge, Cause.BRIDGE_EXITED, message)
            if events:
                log.warning("settled open work of a dead bridge", threadId=thread_id, providerId=bridge.provider_id)
                self._publish(thread_id, bridge.provider_id, events)
                self._advise(bridge, thread_id, message)

    async def on_watchdog(self, bridge: BridgeProcess, events: list[Event]) -> None:
        for event in events:
            log.warning("watchdog fired", code=event["code"], threadId=event["threadId"], providerId=bridge.provider_id)
            self._publish(event["threadId"], bridge.provider_id, [event])

    # -- client → daemon requests --------------------------------------------

    def add_client(self, client: ClientSink) -> None:
        self.clients.append(client)
        self._clients_changed()

    def remove_client(self, client: ClientSink) -> None:
        """A client that goes away resolves nothing: its pending requests stay for the next one."""
        if client in self.clients:
            self.clients.remove(client)
            self._clients_changed()
        self.client_info.pop(client, None)
        self.registry.owner_left(client)

    def _clients_changed(self) -> None:
        self.clients_changed.set()
        self.clients_changed = trio.Event()

    async def handle(self, client: ClientSink, method: str, params: dict[str, Any]) -> Any:
        own = OWN.get(method)
        if own is not None:
            return await own(self, client, params)
        if method not in FORWARDED:
            raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f"Method not found: {method}")
        return await self._forward(client, method, params)

    async def _hello(self, client: ClientSink, params: dict[str, Any]) -> dict[str, Any]:
        """`initialize`: what the client calls itself is kept (its answers are signed with it)."""
        info = params.get("client")
        if isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str):
            self.client_info[client] = {"name": info["name"], "version": info["version"]}
        return self._initialize(params)

    async def _shutdown(self, client: ClientSink, params: dict[str, Any]) -> dict[str, Any]:
        self.request_shutdown()
        await self.stopped.wait()
        return {}

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        providers = [{"providerId": pid, **self.provider_state(pid)} for pid in sorted(self.providers)]
        return {
            "daemon": DAEMON_INFO,
            "protocolVersion": CLIENT_PROTOCOL_VERSION,
            "grammarVersions": [3, 3],
            "providers": providers,
        }

    def _thread_events(self, params: dict[str, Any]) -> dict[str, Any]:
        thread_id = params.get("threadId")
        after = params.get("afterSeq", 0)
        if not isinstance(thread_id, str) or not isinstance(after, int) or isinstance(after, bool) or after < 0:
            raise rpc.RpcError(rpc.INVALID_PARAMS, "thread/events needs threadId (string) and afterSeq (integer ≥ 0)")
        replay = self.journal.after(thread_id, after)
        result: dict[str, Any] = {"events": entries_json(replay.entries), "lastSeq": replay.last_seq}
        if replay.missing_before:
            result["missingThrough"] = replay.missing_before
        return result

    def _thread_inputs(self, params: dict[str, Any]) -> dict[str, Any]:
        """`thread/inputs {threadId, afterSentAt?}`: the turn inputs kept for the thread (`inputs.py`)."""
        try:
            asked = msgspec.convert(params, client_api.ThreadInputsParams)
        except msgspec.ValidationError as exc:
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"thread/inputs: {exc}") from None
        after = None if asked.afterSentAt is msgspec.UNSET else asked.afterSentAt
        return self.inputs.listing(asked.threadId, after)

    async def _forward(self, client: ClientSink, method: str, params: dict[str, Any]) -> Any:
        """A bridge method, with what its rule (`methods.METHODS`) does before and after."""
        rule = METHODS[method]
        thread_id = params.get("threadId")
        call = Call(client, method, params, thread_id if isinstance(thread_id, str) else None)
        await rule.prepare(self, call)
        provider_id = params.get("providerId") if rule.keeps_provider_id else params.pop("providerId", None)
        if provider_id is None and call.thread_id is not None:
            provider_id = self.registry.provider_of(call.thread_id)
        if not isinstance(provider_id, str):
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"{method} needs providerId (string)")
        bridge = call.bridge = await self.bridge(provider_id)
        refusal = protocol.method_allowed(method, bridge.capabilities)
        if refusal is not None:
            raise rpc.RpcError(errors.NOT_ADVERTISED, f"Provider {provider_id!r} refused {method}: {refusal}")
        if call.thread_id is not None:
            known = self.registry.provider_threads.get(call.thread_id)
            if known is not None and not rule.constructs:
                params.setdefault("providerThreadId", known)
            field = rule.turn_field
            if field is not None and isinstance(params.get(field), str):
                params[field] = bridge.assembler.get_provider_turn_id(call.thread_id, params[field]) or params[field]
            await rule.before(self, call)

        def answered(raw: msgspec.Raw) -> None:
            if call.thread_id is not None:
                rule.after_result(self, call, raw)

        timeout = max(self.request_timeout_s, rule.min_timeout_s)
        try:
            raw = await bridge.request(method, params, timeout, on_result=answered)
        except rpc.RpcError as exc:
            instead = rule.after_error(self, call, exc)
            if instead is not None:
                return instead
            if exc.code in DAEMON_MADE:
                raise
            raise bridge.with_env_advice(exc) from None  # "set BB_X …": how, through bbridge
        return msgspec.Raw(raw)


# The methods the daemon answers itself; with FORWARDED, what `openrpc.json` describes.
OWN: dict[str, Callable[[Daemon, ClientSink, dict[str, Any]], Awaitable[Any]]] = {
    "initialize": Daemon._hello,
    "daemon/status": lambda daemon, client, params: _now(daemon.status()),
    "thread/events": lambda daemon, client, params: _now(daemon._thread_events(params)),
    "thread/inputs": lambda daemon, client, params: _now(daemon._thread_inputs(params)),
    "thread/pending": lambda daemon, client, params: _now(daemon.pending_requests(params)),
    "interaction/respond": lambda daemon, client, params: _now(daemon.respond(client, params)),
    "shutdown": Daemon._shutdown,
}
OWN_METHODS = tuple(OWN)


async def _now(result: Any) -> Any:
    """A synchronous method's answer, as the table's awaitable."""
    return result
