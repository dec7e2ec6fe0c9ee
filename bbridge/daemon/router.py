"""The daemon: routes client requests to bridges and bridge output to clients (daemon.md).

This module is the daemon's core: its state, bridge processes and their lifecycle, and client requests, which
flow to bridges with the daemon's translations (bb↔provider turn ids) and capability gating. Its other concerns
are mixins of `Daemon`: bridge output to clients (`delivery.py`), bridge requests held as pending thread state
(`relays.py`), the live view (`status.py`).
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

import msgspec
import structlog
import trio

from bbridge.core.events import Event
from bbridge.daemon.base import CLIENT_PROTOCOL_VERSION, DAEMON_INFO, ClientSink, Counters
from bbridge.daemon.bridge import BridgeProcess, ExitStatus
from bbridge.daemon.config import ConfigReport, ProviderConfig
from bbridge.daemon.delivery import DeliveryMixin, ThreadParams, decode
from bbridge.daemon.extensions import ExtensionChecker
from bbridge.daemon.interactions import Interactions
from bbridge.daemon.journal import Journal, entries_json
from bbridge.daemon.mistakes import Mistakes
from bbridge.daemon.relays import RelayMixin
from bbridge.daemon.status import StatusMixin
from bbridge.daemon.tools import CHECK_DEADLINE_S, MAX_ARGUMENT_BYTES, Checker, DeclarationError, ToolTable
from bbridge.daemon.tracker import Tracker
from bbridge.wire import errors, protocol, rpc

__all__ = ["CLIENT_PROTOCOL_VERSION", "DAEMON_INFO", "ClientSink", "Counters", "Daemon"]

log = structlog.get_logger("bbridge.daemon.router")

DEFAULT_TIMEOUT_S = 30.0
THREAD_CREATION_TIMEOUT_S = 120.0
SHUTDOWN_STOP_TIMEOUT_S = 5.0

FORWARDED = frozenset(protocol.RUNTIME_REQUESTS) - {"initialize"}  # every bridge method but the handshake
# The methods the daemon answers itself (`Daemon.handle`); with FORWARDED, what `openrpc.json` describes.
OWN_METHODS = ("initialize", "daemon/status", "thread/events", "thread/pending", "interaction/respond", "shutdown")
_THREAD_CREATION = frozenset({"thread/start", "thread/resume", "thread/fork"})
_DAEMON_MADE = frozenset({errors.BRIDGE_EXITED, errors.BRIDGE_TIMEOUT})  # a forwarded request's own failures
# Maintenance methods whose own params carry providerId (one bridge may serve several ids): never stripped.
_KEEP_PROVIDER_ID = frozenset(
    {"provider/health", "provider/usage", "provider/installation/status", "provider/installation/run"}
)


class Daemon(DeliveryMixin, RelayMixin, StatusMixin):
    def __init__(
        self,
        providers: dict[str, ProviderConfig],
        *,
        journal: Journal | None = None,
        record_dir: Path | None = None,
        token: str | None = None,
        text_delta_flush_ms: float = 100,
        entropy_prefix: str | None = None,
        request_timeout_s: float = DEFAULT_TIMEOUT_S,
        open_extensions: bool = False,
        config: ConfigReport | None = None,
        tool_check_deadline_s: float = CHECK_DEADLINE_S,
        max_tool_argument_bytes: int = MAX_ARGUMENT_BYTES,
    ) -> None:
        self.providers = providers
        self.config = config or ConfigReport()  # the file and its refused entries, for `daemon/status`
        self.entropy_prefix = entropy_prefix
        self.request_timeout_s = request_timeout_s
        self.journal = journal or Journal()
        self.record_dir = record_dir
        self.token = token
        self.text_delta_flush_ms = text_delta_flush_ms
        self.counters = Counters()
        self.tracker = Tracker()
        self.mistakes = Mistakes()  # each thread's latest bridge mistakes, worded with its keys (daemon/status)
        self.bridges: dict[str, BridgeProcess] = {}
        self.start_failures: dict[str, str] = {}
        self.thread_provider: dict[str, str] = {}
        self.provider_threads: dict[str, str] = {}
        self.thread_owner: dict[str, ClientSink] = {}
        self.tools = ToolTable()  # each thread's declared dynamicTools (the latest successful construction)
        self.checker = Checker(deadline_s=tool_check_deadline_s, max_argument_bytes=max_tool_argument_bytes)
        self.clients: list[ClientSink] = []
        self.client_info: dict[ClientSink, dict[str, str]] = {}  # what each client called itself in initialize
        self.clients_changed = trio.Event()  # replaced (after being set) whenever a client comes or goes
        self.interactions = Interactions(self._broadcast, self.journal.directory)
        self.extensions = {
            pid: ExtensionChecker(pid, cfg.extension_kinds, allow_undeclared=open_extensions)
            for pid, cfg in providers.items()
        }
        self.shutdown_requested = trio.Event()
        self.stopped = trio.Event()
        self._starting: dict[str, trio.Lock] = {}
        self._flush_queue: deque[tuple[float, BridgeProcess, str]] = deque()
        self._flush_wake = trio.Event()
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
                    "providerThreadId": self.provider_threads.get(thread_id),
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
        for thread_id in self._threads_of(bridge):
            streamed = bridge.assembler.streamed_text(thread_id)
            events = self.tracker.settle_failed(thread_id, self.provider_threads.get(thread_id, ""), message, streamed)
            if events:
                log.warning("settled open work of a dead bridge", threadId=thread_id, providerId=bridge.provider_id)
                self._publish(thread_id, bridge.provider_id, events)
                self._advise(bridge, thread_id, message)
            bridge.watchdogs.forget(thread_id)

    def _threads_of(self, bridge: BridgeProcess) -> list[str]:
        return [tid for tid, pid in self.thread_provider.items() if pid == bridge.provider_id] + [
            tid for tid in bridge.threads if tid not in self.thread_provider
        ]

    def waiting_on(self, thread_id: str) -> tuple[str, float] | None:
        """The kind and age of the oldest request a thread waits on (a client's answer, not the bridge)."""
        waiting = self.interactions.of_thread(thread_id)
        if not waiting:
            return None
        oldest = min(waiting, key=lambda p: p.opened)
        return oldest.kind, trio.current_time() - oldest.opened

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
        for thread_id, owner in list(self.thread_owner.items()):
            if owner is client:
                del self.thread_owner[thread_id]

    def _clients_changed(self) -> None:
        self.clients_changed.set()
        self.clients_changed = trio.Event()

    async def handle(self, client: ClientSink, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            info = params.get("client")
            if isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str):
                self.client_info[client] = {"name": info["name"], "version": info["version"]}
            return self._initialize(params)
        if method == "daemon/status":
            return self.status()
        if method == "thread/events":
            return self._thread_events(params)
        if method == "thread/pending":
            return self.pending_requests(params)
        if method == "interaction/respond":
            return self.respond(client, params)
        if method == "shutdown":
            self.request_shutdown()
            await self.stopped.wait()
            return {}
        if method not in FORWARDED:
            raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f"Method not found: {method}")
        return await self._forward(client, method, params)

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

    async def _forward(self, client: ClientSink, method: str, params: dict[str, Any]) -> Any:
        thread_id = params.get("threadId")
        declared = None
        if method in _THREAD_CREATION:
            try:
                declared = await self.tools.declare(params.get("dynamicTools"))  # refused before the bridge is asked
            except DeclarationError as exc:
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"{method}: {exc}") from None
        interrupting = method == "thread/stop" and params.get("intent") == "interrupt" and isinstance(thread_id, str)
        open_before = self.tracker.open_turns(str(thread_id)) if interrupting else []  # before requests are resolved
        provider_id = params.get("providerId") if method in _KEEP_PROVIDER_ID else params.pop("providerId", None)
        if provider_id is None and isinstance(thread_id, str):
            provider_id = self.thread_provider.get(thread_id)
        if not isinstance(provider_id, str):
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"{method} needs providerId (string)")
        bridge = await self.bridge(provider_id)
        refusal = protocol.method_allowed(method, bridge.capabilities)
        if refusal is not None:
            raise rpc.RpcError(errors.NOT_ADVERTISED, f"Provider {provider_id!r} refused {method}: {refusal}")
        if isinstance(thread_id, str):
            known = self.provider_threads.get(thread_id)
            if known is not None and method not in _THREAD_CREATION:
                params.setdefault("providerThreadId", known)
            self._translate_turn_ids(bridge, method, thread_id, params)
            if method in _THREAD_CREATION:
                self.thread_provider[thread_id] = provider_id
                self.thread_owner[thread_id] = client
                bridge.threads.add(thread_id)
                supplied = params.get("providerThreadId")
                if method == "thread/resume" and isinstance(supplied, str) and supplied:
                    self.provider_threads[thread_id] = supplied  # recorded before sending (protocol.md §3.3.6)
            elif method == "turn/start":
                bridge.watchdogs.turn_dispatched(thread_id, trio.current_time())
            elif method == "thread/stop":  # nothing the thread waits on outlives its stop
                await self.resolve_thread(thread_id, "the thread was stopped")
        timeout = self.request_timeout_s
        if method in ("thread/start", "thread/fork"):
            timeout = max(timeout, THREAD_CREATION_TIMEOUT_S)

        def answered(raw: msgspec.Raw) -> None:
            """In order with the bridge's notifications: a release forgets the thread before a resume's first
            events, a construction's identity is known before its first turn's."""
            if isinstance(thread_id, str):
                if declared is not None:
                    self.tools.set(thread_id, declared)  # the latest successful construction wins
                self._after_forward(bridge, method, thread_id, params, raw)

        try:
            raw = await bridge.request(method, params, timeout, on_result=answered)
        except rpc.RpcError as exc:
            if method == "turn/start" and isinstance(thread_id, str):
                bridge.watchdogs.dispatch_failed(thread_id)
            if (
                open_before
                and isinstance(thread_id, str)
                and self._stop_lost_its_race(bridge, thread_id, open_before, exc)
            ):
                return {"turnAlreadyEnded": True}
            if exc.code in _DAEMON_MADE:
                raise
            raise bridge.with_env_advice(exc) from None  # "set BB_X …": how, through bbridge
        return msgspec.Raw(raw)

    def _stop_lost_its_race(self, bridge: BridgeProcess, thread_id: str, turns: list[str], exc: rpc.RpcError) -> bool:
        """An interrupt the bridge refused (`no active turn`) after the turns open at the stop settled meanwhile
        (a declined approval ended the turn first): the thread is stopped, so is the client's stop."""
        if exc.code in _DAEMON_MADE or bridge.state != "ready":
            return False  # the bridge did not answer (exit, timeout): the turns were settled by the daemon, not it
        if set(turns) & set(self.tracker.open_turns(thread_id)):
            return False
        log.info(
            "an interrupt was refused after the turn had ended; the stop succeeds",
            providerId=bridge.provider_id,
            threadId=thread_id,
            turns=turns,
            error=exc.message,
        )
        return True

    def _translate_turn_ids(self, bridge: BridgeProcess, method: str, thread_id: str, params: dict[str, Any]) -> None:
        field = "expectedTurnId" if method == "turn/steer" else "activeTurnId" if method == "thread/stop" else None
        if field is not None and isinstance(params.get(field), str):
            params[field] = bridge.assembler.get_provider_turn_id(thread_id, params[field]) or params[field]

    def _after_forward(
        self, bridge: BridgeProcess, method: str, thread_id: str, params: dict[str, Any], raw: msgspec.Raw
    ) -> None:
        if method in _THREAD_CREATION:
            result = decode(raw, ThreadParams)
            if result is not None and result.providerThreadId:
                self.provider_threads[thread_id] = result.providerThreadId
        elif method == "thread/stop" and params.get("intent") == "release":
            bridge.guard.clear_thread(thread_id)
            bridge.watchdogs.forget(thread_id)
            bridge.threads.discard(thread_id)
            self.tools.forget(thread_id)
