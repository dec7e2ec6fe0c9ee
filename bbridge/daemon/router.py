"""The daemon: routes client requests to bridges and bridge output to clients (daemon.md).

Bridge `thread/delta` notifications flow decode → assemble → stamp → check
(extension payloads, grammar guard) → journal → every client, one
`thread/events` message per notification; all but the decode is one compiled
call per notification (`bbridge.core.outbox.Delivery`). Requests flow the
other way with the daemon's translations (bb↔provider turn ids) and
capability gating.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec
import structlog
import trio

from bbridge.core import grammar, native
from bbridge.core.events import Event
from bbridge.core.outbox import Delivery
from bbridge.daemon.bridge import BridgeProcess, ExitStatus
from bbridge.daemon.config import ConfigReport, ProviderConfig
from bbridge.daemon.extensions import CHECKED_TYPES, ExtensionChecker
from bbridge.daemon.journal import Journal, entries_json
from bbridge.daemon.tools import CHECK_DEADLINE_S, MAX_ARGUMENT_BYTES, Checker, DeclarationError, Refusal, ToolTable
from bbridge.daemon.tools import failed_result as failed_tool_result
from bbridge.daemon.tracker import Tracker
from bbridge.daemon.watchdog import Watchdogs
from bbridge.wire import errors, protocol, rpc
from bbridge.wire.interactions import ToolCallResult

log = structlog.get_logger("bbridge.daemon.router")

DAEMON_INFO = {"name": "bbridge", "version": "0.1.0"}
CLIENT_PROTOCOL_VERSION = 1
DEFAULT_TIMEOUT_S = 30.0
THREAD_CREATION_TIMEOUT_S = 120.0
SHUTDOWN_STOP_TIMEOUT_S = 5.0

FORWARDED = frozenset(
    {
        "model/list", "provider/health", "provider/usage", "provider/installation/status",
        "provider/installation/run", "thread/start", "thread/resume", "thread/fork", "turn/start",
        "turn/steer", "thread/stop", "thread/discard", "thread/name/set", "thread/archive",
        "thread/unarchive", "thread/goal/clear", "skills/configure",
    }
)  # fmt: skip
_THREAD_CREATION = frozenset({"thread/start", "thread/resume", "thread/fork"})
_RELAYED = frozenset({"item/tool/call", "interaction/request"})
# Maintenance methods whose own params carry providerId (one bridge may serve several ids): never stripped.
_KEEP_PROVIDER_ID = frozenset(
    {"provider/health", "provider/usage", "provider/installation/status", "provider/installation/run"}
)
_FORWARDED_NOTIFICATIONS = frozenset({"thread/identity", "session/replaced", "provider/recovery"})
_LIFECYCLE = Tracker.OBSERVED_TYPES | Watchdogs.OBSERVED_TYPES  # the rest pass both untouched


class ClientSink(Protocol):
    """What the daemon needs of a connected client (a socket/stdio client, or `bbridge run`)."""

    name: str

    def enqueue(self, lines: list[bytes]) -> None:
        """Queue encoded notifications, in order; never blocks (a slow client is dropped instead)."""

    async def relay(self, method: str, params: dict[str, Any]) -> msgspec.Raw:
        """Ask the client to answer a bridge's request."""
        ...


@dataclass
class Counters:
    deltas_in: int = 0
    notifications_in: int = 0
    events_out: int = 0  # the journal's count, copied in when the status is read
    rejected_notifications: int = 0
    grammar_drops: int = 0
    unhandled_extensions: int = 0
    clients_disconnected_slow: int = 0
    rejected_bridge_requests: int = 0  # schema-invalid item/tool/call or interaction/request (protocol.md §1.5)
    failed_notifications: int = 0  # a handler error: that notification is lost, the rest of its batch is not
    tool_calls_relayed: int = 0  # item/tool/call that passed its checks and went to the client
    tool_calls_refused: int = 0  # answered failed at once: undeclared tool, arguments invalid, too large or unchecked
    tool_calls_failed: int = 0  # relayed, then the client answered an error or an invalid tool result


class _ThreadParams(msgspec.Struct):
    threadId: str | None = None
    providerThreadId: str | None = None


class _Identity(msgspec.Struct):
    threadId: str
    providerThreadId: str


class _Replaced(msgspec.Struct):
    threadId: str
    reason: str
    providerThreadId: str | None = None
    contextLost: bool = False


class Daemon:
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
        self.bridges: dict[str, BridgeProcess] = {}
        self.thread_provider: dict[str, str] = {}
        self.provider_threads: dict[str, str] = {}
        self.thread_owner: dict[str, ClientSink] = {}
        self.tools = ToolTable()  # each thread's declared dynamicTools (the latest successful construction)
        self.checker = Checker(deadline_s=tool_check_deadline_s, max_argument_bytes=max_tool_argument_bytes)
        self.clients: list[ClientSink] = []
        self.extensions = {
            pid: ExtensionChecker(pid, cfg.extension_kinds, allow_undeclared=open_extensions)
            for pid, cfg in providers.items()
        }
        self.shutdown_requested = trio.Event()
        self.stopped = trio.Event()
        self._starting: dict[str, trio.Lock] = {}
        self._flushing: set[tuple[int, str]] = set()
        self._nursery: trio.Nursery | None = None
        self._started_at = time.time()

    # -- running -------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Owns the bridges; returns after `shutdown` has stopped them all."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
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
            known = ", ".join(sorted(self.providers))
            raise rpc.RpcError(errors.UNKNOWN_PROVIDER, f"Unknown provider {provider_id!r} (configured: {known})")
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
            except rpc.RpcError:
                if self.bridges.get(provider_id) is bridge:
                    del self.bridges[provider_id]
                raise
            return bridge

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
            bridge.watchdogs.forget(thread_id)

    def _threads_of(self, bridge: BridgeProcess) -> list[str]:
        return [tid for tid, pid in self.thread_provider.items() if pid == bridge.provider_id] + [
            tid for tid in bridge.threads if tid not in self.thread_provider
        ]

    async def on_watchdog(self, bridge: BridgeProcess, events: list[Event]) -> None:
        for event in events:
            log.warning("watchdog fired", code=event["code"], threadId=event["threadId"], providerId=bridge.provider_id)
            self._publish(event["threadId"], bridge.provider_id, [event])

    # -- bridge → daemon traffic ---------------------------------------------

    async def on_notifications(self, bridge: BridgeProcess, batch: list[rpc.Notification]) -> None:
        """One read's notifications, in order; the `thread/events` lines they make go to the clients together."""
        now = trio.current_time()
        self.counters.notifications_in += len(batch)
        lines: list[bytes] = []
        touched: set[str] = set()  # threads heard from, for the watchdogs
        deltas = 0
        first = len(batch) > 1 and bool(self.clients)
        take, now_ms, coalescing = bridge.delivery.take, now * 1000, self.text_delta_flush_ms > 0
        for note in batch:
            method = note.method
            try:
                if method == "thread/delta":
                    params: grammar.ThreadDeltaParams | None = note.decoded  # decoded in the framing pass
                    if params is None:
                        params = self._decode_delta(bridge, note.params)
                    if params is not None:
                        thread_id = params.threadId
                        touched.add(thread_id)
                        deltas += len(params.deltas)
                        line = take(thread_id, params.deltas, now_ms)
                        if line is not None:
                            lines.append(line)
                        if coalescing:
                            self._schedule_flush(bridge, thread_id)
                    if first and lines:  # the chunk's first events reach the clients before the rest is assembled
                        first = False
                        lines = self._broadcast(lines)
                        self._take_notices(bridge, now)  # nothing else runs before the watchers have seen them
                        await _let_writers_run()
                    continue
                lines = self._broadcast(lines)  # what came before goes out first
                if method in _FORWARDED_NOTIFICATIONS:
                    self._on_forwarded(bridge, method, note.params)
                elif method == "error":
                    self._on_bridge_error(bridge, note.params)
            except Exception:
                self.counters.failed_notifications += 1
                log.exception(
                    "a bridge notification failed; the rest of its batch goes on",
                    providerId=bridge.provider_id,
                    method=method,
                )
        self._broadcast(lines)
        self._take_notices(bridge, now)
        self.counters.deltas_in += deltas
        bridge.threads |= touched
        bridge.watchdogs.traffic(touched, now)

    def _decode_delta(self, bridge: BridgeProcess, raw: msgspec.Raw | None) -> grammar.ThreadDeltaParams | None:
        """The params the framing pass left undecoded (screened or not typed): decoded here, or refused."""
        try:
            return grammar.decode_params(raw if raw is not None else b"null")
        except grammar.GrammarError as exc:
            self.counters.rejected_notifications += 1
            log.warning("skipped an invalid thread/delta notification", providerId=bridge.provider_id, error=str(exc))
            return None

    def open_delivery(self, bridge: BridgeProcess) -> Delivery:
        """The bridge's compiled path from deltas to `thread/events` lines: its assembler and guard, this
        daemon's journal, thread identities and extension checks, and the event types the watchers need."""
        checker = self.extensions.get(bridge.provider_id)
        return Delivery(
            bridge.provider_id,
            bridge.assembler,
            bridge.guard,
            self.journal.log,
            self.provider_threads,
            _LIFECYCLE,
            None if checker is None else checker.check,
            CHECKED_TYPES,
        )

    def _take_notices(self, bridge: BridgeProcess, now: float) -> None:
        """What the bridge's delivery collected: lifecycle events for the tracker and watchdogs, the guard's
        drops (counted and logged) and the extension check's replacements (counted)."""
        delivery = bridge.delivery
        if delivery.noticed:
            noticed, delivery.noticed = delivery.noticed, []
            tracker, watchdogs = self.tracker, bridge.watchdogs
            for thread_id, event in noticed:
                tracker.observe(thread_id, event)
                watchdogs.observe(thread_id, event, now)
        if delivery.dropped:
            dropped, delivery.dropped = delivery.dropped, []
            self.counters.grammar_drops += len(dropped)
            for thread_id, event, violation in dropped:
                log.warning(
                    f"Dropping {event['type']} from provider {bridge.provider_id!r} in thread {thread_id!r} "
                    f"({violation.rule}): {violation.reason}.",
                    threadId=thread_id,
                    providerId=bridge.provider_id,
                    rule=violation.rule,
                )
        if delivery.replaced:
            self.counters.unhandled_extensions += delivery.replaced
            delivery.replaced = 0

    def _deliver(self, bridge: BridgeProcess, thread_id: str, events: list[Event]) -> None:
        """Events made outside a notification (a due text flush, a daemon warning), through the bridge's
        delivery and out at once."""
        line = bridge.delivery.deliver(thread_id, events)
        self._take_notices(bridge, trio.current_time())
        if line is not None:
            self._broadcast([line])
        if self.text_delta_flush_ms > 0:
            self._schedule_flush(bridge, thread_id)

    def _schedule_flush(self, bridge: BridgeProcess, thread_id: str) -> None:
        """Coalesced text waits for traffic in the reference; here a timer drains it when due (when the thread
        has text pending and no timer yet)."""
        if self._nursery is None or not bridge.assembler.has_pending_text(thread_id):
            return
        key = (id(bridge), thread_id)
        if key in self._flushing:
            return
        self._flushing.add(key)

        async def flush_later() -> None:
            await trio.sleep(self.text_delta_flush_ms / 1000)
            self._flushing.discard(key)
            if bridge.state == "ready":
                self._deliver(bridge, thread_id, bridge.assembler.assemble(thread_id, [], trio.current_time() * 1000))

        self._nursery.start_soon(flush_later)

    def _publish(self, thread_id: str, provider_id: str, events: list[Event]) -> None:
        """Daemon-made events past the bridge's guard (the bridge is gone, or a watchdog speaks): journaled, out."""
        self._broadcast([self.journal.log.record(thread_id, provider_id, events)])

    def _broadcast(self, lines: list[bytes]) -> list[bytes]:
        """Hands the lines to every client, in order; returns a fresh list for the caller's next lines."""
        if lines:
            for client in list(self.clients):
                client.enqueue(lines)
        return []

    def _on_forwarded(self, bridge: BridgeProcess, method: str, raw: msgspec.Raw | None) -> None:
        try:
            params = msgspec.json.decode(raw) if raw is not None else {}
        except msgspec.DecodeError:
            return
        if not isinstance(params, dict):
            return
        if method == "thread/identity":
            identity = _decode(raw, _Identity)
            if identity is not None:
                self.provider_threads[identity.threadId] = identity.providerThreadId
                bridge.threads.add(identity.threadId)
        elif method == "session/replaced":
            replaced = _decode(raw, _Replaced)
            if replaced is not None and replaced.providerThreadId and replaced.contextLost:
                self._deliver_warning(
                    bridge,
                    replaced.threadId,
                    "Provider session was replaced; provider-side context was lost.",
                    replaced.reason,
                )
        params["providerId"] = bridge.provider_id
        self._broadcast([rpc.encode_notification(method, params)])

    def _on_bridge_error(self, bridge: BridgeProcess, raw: msgspec.Raw | None) -> None:
        params = _decode(raw, _ThreadParams)
        message = _decode(raw, _Message)
        if params is not None and message is not None and params.threadId and params.providerThreadId:
            self._deliver_warning(bridge, params.threadId, message.message, None)

    def _deliver_warning(self, bridge: BridgeProcess, thread_id: str, summary: str, details: str | None) -> None:
        event: Event = {"type": "provider/warning", "threadId": "", "providerThreadId": "", "scope": {"kind": "thread"}}
        event["category"] = "general"
        event["summary"] = summary
        if details is not None:
            event["details"] = details
        self._deliver(bridge, thread_id, [event])

    async def on_bridge_request(self, bridge: BridgeProcess, request: rpc.Request) -> Any:
        """Relay `item/tool/call` / `interaction/request` to the thread's client."""
        unsupported = rpc.RpcError(rpc.METHOD_NOT_FOUND, f'Unsupported provider request "{request.method}"')
        if request.method not in _RELAYED:
            raise unsupported
        raw = request.params if request.params is not None else b"null"
        try:
            protocol.decode_method_params(request.method, raw)
        except protocol.InvalidParams as exc:
            self.counters.rejected_bridge_requests += 1
            log.warning(
                "refused a malformed provider request",
                providerId=bridge.provider_id,
                method=request.method,
                issue=exc.issues[0],
            )
            raise unsupported from None
        params = msgspec.json.decode(raw)
        thread_id = params.get("threadId")
        if params.get("providerNativeIds") is True and isinstance(thread_id, str):
            _translate_native_ids(bridge, thread_id, params)
        if request.method == "item/tool/call":
            return await self._tool_call(bridge, params)
        client = self._answering_client(bridge, request.method, thread_id)
        params["providerId"] = bridge.provider_id
        return await client.relay(request.method, params)

    def _answering_client(self, bridge: BridgeProcess, method: str, thread_id: Any) -> ClientSink:
        client = self.thread_owner.get(thread_id) if isinstance(thread_id, str) else None
        if client is None or client not in self.clients:
            client = self.clients[-1] if self.clients else None
        if client is None:
            raise rpc.RpcError(
                errors.NO_CLIENT, f"No client is connected to answer {method} from provider {bridge.provider_id!r}"
            )
        return client

    async def _tool_call(self, bridge: BridgeProcess, params: dict[str, Any]) -> Any:
        """Check a call against its thread's declared tools (`daemon/tools.py`), then relay it and check the answer.

        An undeclared tool or arguments that fail, exceed or outlast their checks are answered to the bridge at
        once as a failed call naming the tool, the path and the reason, so the model can correct itself; the
        client never sees them. A client answer that is no `ToolCallResult` reaches the bridge as a failed call.
        """
        thread_id = self._tool_thread(bridge, params)
        name: str = params["tool"]
        found = self.tools.lookup(thread_id, name)
        refusal = found if isinstance(found, Refusal) else None
        if not isinstance(found, Refusal):
            params["tool"] = found.name  # `mcp__bb-bridge__<name>` reaches the client as the name it declared
            refusal = await self.checker.check(found, params.setdefault("arguments", {}))
        if refusal is not None:
            self.counters.tool_calls_refused += 1
            log.info(
                "refused a tool call",
                providerId=bridge.provider_id,
                threadId=thread_id,
                tool=name,
                reason=refusal.message,
            )
            return refusal.result()
        client = self._answering_client(bridge, "item/tool/call", thread_id)
        params["providerId"] = bridge.provider_id
        self.counters.tool_calls_relayed += 1
        try:
            answer = await client.relay("item/tool/call", params)
        except rpc.RpcError:
            self.counters.tool_calls_failed += 1
            raise
        try:
            msgspec.json.decode(answer, type=ToolCallResult)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            self.counters.tool_calls_failed += 1
            log.warning(
                "a client answered a tool call with an invalid tool result",
                providerId=bridge.provider_id,
                threadId=thread_id,
                tool=params["tool"],
                client=client.name,
                error=str(exc),
            )
            return failed_tool_result(
                f'The client\'s answer to tool "{params["tool"]}" was not a valid tool result ({exc}); the call failed'
            )
        return answer

    def _tool_thread(self, bridge: BridgeProcess, params: dict[str, Any]) -> str | None:
        """The bb thread of a tool call on this bridge: its `threadId`, else the one with its `providerThreadId`."""
        thread_id = params.get("threadId")
        if not isinstance(thread_id, str):
            provider_thread = params.get("providerThreadId")
            thread_id = next(
                (
                    tid
                    for tid, ptid in self.provider_threads.items()
                    if ptid == provider_thread and self.thread_provider.get(tid) == bridge.provider_id
                ),
                None,
            )
        if thread_id is None or self.thread_provider.get(thread_id) != bridge.provider_id:
            return None  # another provider's thread never lends its tools
        return thread_id

    # -- client → daemon requests --------------------------------------------

    def add_client(self, client: ClientSink) -> None:
        self.clients.append(client)

    def remove_client(self, client: ClientSink) -> None:
        if client in self.clients:
            self.clients.remove(client)
        for thread_id, owner in list(self.thread_owner.items()):
            if owner is client:
                del self.thread_owner[thread_id]

    async def handle(self, client: ClientSink, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            return self._initialize(params)
        if method == "daemon/status":
            return self.status()
        if method == "thread/events":
            return self._thread_events(params)
        if method == "shutdown":
            self.request_shutdown()
            await self.stopped.wait()
            return {}
        if method not in FORWARDED:
            raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f"Method not found: {method}")
        return await self._forward(client, method, params)

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        providers = [
            {"providerId": pid, "state": self.bridges[pid].state if pid in self.bridges else "idle"}
            for pid in sorted(self.providers)
        ]
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
        except rpc.RpcError:
            if method == "turn/start" and isinstance(thread_id, str):
                bridge.watchdogs.dispatch_failed(thread_id)
            raise
        return msgspec.Raw(raw)

    def _translate_turn_ids(self, bridge: BridgeProcess, method: str, thread_id: str, params: dict[str, Any]) -> None:
        field = "expectedTurnId" if method == "turn/steer" else "activeTurnId" if method == "thread/stop" else None
        if field is not None and isinstance(params.get(field), str):
            params[field] = bridge.assembler.get_provider_turn_id(thread_id, params[field]) or params[field]

    def _after_forward(
        self, bridge: BridgeProcess, method: str, thread_id: str, params: dict[str, Any], raw: msgspec.Raw
    ) -> None:
        if method in _THREAD_CREATION:
            result = _decode(raw, _ThreadParams)
            if result is not None and result.providerThreadId:
                self.provider_threads[thread_id] = result.providerThreadId
        elif method == "thread/stop" and params.get("intent") == "release":
            bridge.guard.clear_thread(thread_id)
            bridge.watchdogs.forget(thread_id)
            bridge.threads.discard(thread_id)
            self.tools.forget(thread_id)

    # -- status --------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        now = trio.current_time()
        self.counters.events_out = self.journal.log.recorded
        providers = []
        for pid in sorted(self.providers):
            bridge = self.bridges.get(pid)
            entry: dict[str, Any] = {"providerId": pid, "state": bridge.state if bridge else "idle"}
            if bridge is not None:
                entry.update(
                    pid=bridge.pid,
                    capabilities=msgspec.to_builtins(bridge.capabilities),
                    uptimeS=round(now - bridge.started_at, 3),
                    threads=len(bridge.threads),
                )
            providers.append(entry)
        return {
            "daemon": {
                **DAEMON_INFO,
                "uptimeS": round(time.time() - self._started_at, 3),
                "clients": len(self.clients),
                "core": native.describe(),  # compiled (mypyc) or pure, and why
            },
            "providers": providers,
            "threads": list(self._thread_status()),
            "counters": msgspec.to_builtins(self.counters),
            "config": msgspec.to_builtins(self.config),
            "journal": self.journal.health(),
        }

    def _thread_status(self) -> Iterable[dict[str, Any]]:
        tracked = self.tracker.threads()
        for thread_id, last_seq in sorted(self.journal.threads().items()):
            provider_id = self.thread_provider.get(thread_id)
            bridge = self.bridges.get(provider_id) if provider_id else None
            work = tracked.get(thread_id)
            yield {
                "threadId": thread_id,
                "providerId": provider_id,
                "providerThreadId": self.provider_threads.get(thread_id),
                "openTurns": list(work.open_turns) if work else [],
                "openItems": list(work.open_items) if work else [],
                "pendingAcceptedInput": bridge.assembler.pending_input_count(thread_id) if bridge else 0,
                "pendingTurnStart": bridge.watchdogs.pending_start(thread_id) if bridge else False,
                "lastSeq": last_seq,
            }


async def _let_writers_run() -> None:
    """Two checkpoints: trio runs each batch of ready tasks in random order, so after the second one every
    client writer woken before the first has had its turn, and a writer sends in its first turn (`rpc`'s write
    lock is taken without a checkpoint when free).

    Then the CPU is offered to whoever those sends woke. Linux tends to wake a reader on its writer's CPU, and
    there the scheduler lets the writer run on until its time slice ends or it blocks: the client would read its
    first events only after the daemon has assembled the rest of the read (measured: most of the 50 %-load p99
    in `make bench`). One `sched_yield` per read lets a client sharing the daemon's CPU take them now; with
    nothing else runnable it returns at once."""
    await trio.lowlevel.checkpoint()
    await trio.lowlevel.checkpoint()
    os.sched_yield()


class _Message(msgspec.Struct):
    message: str


def _decode(raw: msgspec.Raw | None, kind: type[Any]) -> Any:
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _translate_native_ids(bridge: BridgeProcess, thread_id: str, params: dict[str, Any]) -> None:
    """Provider-native turn/item ids on relayed requests become bb ids (protocol.md §3.6)."""
    assembler = bridge.assembler
    turn = params.get("turnId")
    if isinstance(turn, str):
        params["turnId"] = assembler.get_bb_turn_id(thread_id, turn) or turn
    call = params.get("callId")
    if isinstance(call, str):
        params["callId"] = assembler.get_bb_item_id(thread_id, call) or call
    payload = params.get("payload")
    subject = payload.get("subject") if isinstance(payload, dict) else None
    if isinstance(subject, dict) and isinstance(subject.get("itemId"), str):
        subject["itemId"] = assembler.get_bb_item_id(thread_id, subject["itemId"]) or subject["itemId"]
