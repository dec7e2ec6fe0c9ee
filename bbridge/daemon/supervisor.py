"""The bridge processes: one per provider, spawned and handshaken on first use, stopped at shutdown, and what
their exits and watchdogs leave behind; and `release`, the one place a thread is let go.

The supervisor owns the bridges (by provider) and why a provider's last start failed. It is every bridge's host
(`bridge.BridgeHost`): a bridge's notifications go to the output (`delivery.Output`), its requests to the relays
(`relays.Relays`), its exit and watchdogs come here. A release clears what `threads.LETS_GO` names for its cause
in three places: the open work (settled as failed when the bridge exited), the bridge (`BridgeProcess.let_go`)
and the thread's record (`ThreadRegistry.let_go`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import trio

from bbridge.core.event_log import Delivery
from bbridge.core.events import Event
from bbridge.daemon.bridge import BridgeProcess, ExitStatus
from bbridge.daemon.config import ConfigReport, ProviderConfig
from bbridge.daemon.delivery import Output
from bbridge.daemon.fanout import Fanout
from bbridge.daemon.inputs import Inputs
from bbridge.daemon.relays import Relays
from bbridge.daemon.threads import LETS_GO, Cause, Piece, ThreadRegistry
from bbridge.daemon.tracker import Tracker
from bbridge.daemon.watchdog import Slots
from bbridge.wire import errors, maintenance, rpc
from bbridge.wire.redact import Pattern

log = structlog.get_logger("bbridge.daemon.supervisor")

SHUTDOWN_STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Spawning:
    """How every bridge process is made: its recording, its coalescing window, its ids' entropy."""

    record_dir: Path | None = None
    redactions: Sequence[Pattern] = field(default_factory=tuple)  # what every recorded lane is redacted with
    text_delta_flush_ms: float = 100
    entropy_prefix: str | None = None
    skill_roots: Callable[[str], list[maintenance.SkillRoot] | None] = lambda _: None  # sent in `skills/configure`


class Supervisor:
    """The providers' bridge processes, and the host each of them reports to."""

    def __init__(
        self,
        providers: dict[str, ProviderConfig],
        config: ConfigReport,
        spawning: Spawning,
        fanout: Fanout,
        registry: ThreadRegistry,
        tracker: Tracker,
        bridges: dict[str, BridgeProcess],
        output: Output,
        relays: Relays,
        inputs: Inputs,
    ) -> None:
        self._providers = providers
        self._config = config
        self._spawning = spawning
        self._fanout = fanout
        self._registry = registry
        self._tracker = tracker
        self._output = output
        self._relays = relays
        self._inputs = inputs
        # a bridge's reads go straight to the output's handler: no coroutine of the supervisor's per read
        self.on_notifications = output.on_notifications
        self.bridges = bridges  # by provider: its current process (the output and relays read the same dict)
        self.start_failures: dict[str, str] = {}  # provider id -> why its last start failed (until one succeeds)
        self._starting: dict[str, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None
        self._closed = False

    @property
    def records(self) -> Slots:
        """The thread records, where each bridge's watchdogs keep their state (`BridgeHost`)."""
        return self._registry

    def start(self, nursery: trio.Nursery) -> None:
        """Where bridge processes run from now on (the daemon's nursery)."""
        self._nursery = nursery

    # -- bridges ---------------------------------------------------------------------------------------------

    async def bridge(self, provider_id: str) -> BridgeProcess:
        """The provider's ready bridge, spawned and handshaken on first use."""
        config = self._providers.get(provider_id)
        if config is None:
            raise rpc.RpcError(errors.UNKNOWN_PROVIDER, self._unknown_provider(provider_id))
        if self._closed:
            raise rpc.RpcError(errors.SHUTTING_DOWN, "The daemon is shutting down")
        lock = self._starting.setdefault(provider_id, trio.Lock())
        async with lock:
            current = self.bridges.get(provider_id)
            if current is not None and current.state == "ready":
                current.last_used = trio.current_time()  # handed out: not idle (`idle.py`)
                return current
            assert self._nursery is not None
            spawning = self._spawning
            bridge = BridgeProcess(
                provider_id,
                config,
                self,
                record_dir=spawning.record_dir,
                redactions=spawning.redactions,
                text_delta_flush_ms=spawning.text_delta_flush_ms,
                entropy_prefix=spawning.entropy_prefix,
                skill_roots=spawning.skill_roots(provider_id),
            )
            self.bridges[provider_id] = bridge
            try:
                await self._started(bridge)
            except rpc.RpcError as exc:
                if self.bridges.get(provider_id) is bridge:
                    del self.bridges[provider_id]
                self.start_failures[provider_id] = bridge.reason or exc.message  # status: `failed: <reason>`
                raise
            self.start_failures.pop(provider_id, None)
            return bridge

    async def _started(self, bridge: BridgeProcess) -> None:
        """The bridge spawned and handshaken (`BridgeProcess.start`), a `bbridge.bridge.start` span when traced."""
        assert self._nursery is not None
        attributes = {"bbridge.provider_id": bridge.provider_id}
        span = self._fanout.tracer.start("bbridge.bridge.start", None, attributes)
        try:
            await bridge.start(self._nursery)
        except BaseException as exc:
            span.end(bridge.reason or str(exc) or type(exc).__name__)
            raise
        if bridge.pid is not None:
            span.set("process.pid", bridge.pid)
        span.end()

    def _unknown_provider(self, provider_id: str) -> str:
        """Why a request names no provider: the configuration refused its section (each refusal line), or the
        name is not configured at all."""
        section = f"providers.{provider_id}"
        refusals = [refusal.line() for refusal in self._config.refused if refusal.section == section]
        if refusals:
            return (
                f"Provider {provider_id!r} was refused by the configuration ({self._config.path}): "
                f"{'; '.join(refusals)}. Fix the entry and restart the daemon (`bbridge config check` lists every "
                "refused entry)"
            )
        return f"Unknown provider {provider_id!r} (configured: {', '.join(sorted(self._providers))})"

    def provider_state(self, provider_id: str) -> dict[str, str]:
        """`{state[, reason]}`: its bridge's state; with none running, `failed` and why when its last start
        failed (the next request tries again), else `idle`."""
        bridge = self.bridges.get(provider_id)
        if bridge is not None:
            return {"state": bridge.state, **({"reason": bridge.reason} if bridge.reason else {})}
        reason = self.start_failures.get(provider_id)
        return {"state": "failed", "reason": reason} if reason is not None else {"state": "idle"}

    async def stop_idle(self, bridge: BridgeProcess, still_idle: Callable[[BridgeProcess], bool]) -> bool:
        """Stop an idle bridge (its usual stop: `BridgeProcess.terminate`) if it is still the provider's and still
        idle; a request for the provider meanwhile waits, then starts another. Whether it was stopped."""
        async with self._starting.setdefault(bridge.provider_id, trio.Lock()):
            if self.bridges.get(bridge.provider_id) is not bridge or bridge.state != "ready" or not still_idle(bridge):
                return False
            await bridge.terminate()
            return True

    def close(self) -> None:
        """Shutdown is asked for: no bridge starts any more."""
        self._closed = True

    async def stop_all(self) -> None:
        """Shutdown: each live turn is interrupted (its bridge settles it), then every process is terminated."""
        self.close()
        async with trio.open_nursery() as nursery:
            for bridge in list(self.bridges.values()):
                nursery.start_soon(self._stop, bridge)

    async def _stop(self, bridge: BridgeProcess) -> None:
        if bridge.state == "ready":
            for thread_id in list(bridge.threads):
                turns = self._tracker.open_turns(thread_id)
                if not turns:
                    continue
                params = {
                    "threadId": thread_id,
                    "providerThreadId": self._registry.provider_threads.get(thread_id),
                    "intent": "interrupt",
                    "activeTurnId": bridge.provider_turn(thread_id, turns[0]),
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

    # -- letting a thread go -----------------------------------------------------------------------------------

    def release(self, thread_id: str, bridge: BridgeProcess, cause: Cause, message: str = "") -> list[Event]:
        """Let the thread go from `bridge` for `cause`, clearing what `LETS_GO` names; returns the events that
        settle its open work as failed (a bridge exit, with `message`; none otherwise)."""
        pieces = LETS_GO[cause]
        settlement: list[Event] = []
        if Piece.TRACKER in pieces:
            streamed = bridge.assembler.streamed_text(thread_id)
            provider_thread = self._registry.provider_threads.get(thread_id, "")
            settlement = self._tracker.settle_failed(thread_id, provider_thread, message, streamed)
        bridge.let_go(thread_id, pieces)
        self._registry.let_go(thread_id, cause)
        if Piece.INPUTS in pieces:
            self._inputs.let_go(thread_id)
        if Piece.EVENTS in pieces:
            self._fanout.journal.let_go(thread_id)
        return settlement

    def threads_of(self, bridge: BridgeProcess) -> Iterator[str]:
        """The threads constructed on the bridge's provider, then those no client constructed that it serves or
        watches."""
        return self._registry.of_provider(bridge.provider_id, bridge.threads.union(bridge.watchdogs.watched))

    # -- the host of every bridge (`bridge.BridgeHost`) ---------------------------------------------------------

    async def on_bridge_request(self, bridge: BridgeProcess, request: rpc.Request) -> Any:
        return await self._relays.on_bridge_request(bridge, request)

    def open_delivery(self, bridge: BridgeProcess) -> Delivery:
        return self._output.open_delivery(bridge)

    def on_status(self, bridge: BridgeProcess) -> None:
        params: dict[str, Any] = {"providerId": bridge.provider_id, "state": bridge.state, "pid": bridge.pid}
        if bridge.exit is not None:
            if bridge.exit.code is not None:
                params["exitCode"] = bridge.exit.code
            if bridge.exit.signal is not None:
                params["signal"] = bridge.exit.signal
        if bridge.reason:
            params["reason"] = bridge.reason
        self._fanout.broadcast([rpc.encode_notification("bridge/status", params)])

    async def on_exit(self, bridge: BridgeProcess, status: ExitStatus) -> None:
        """Its pending requests resolved by policy, then each of its threads let go, its open work settled."""
        if self.bridges.get(bridge.provider_id) is bridge:
            del self.bridges[bridge.provider_id]
        self._relays.resolve_provider(bridge.provider_id, f"provider {bridge.provider_id!r} exited")
        verb = "stopped" if bridge.stopping else "exited unexpectedly"
        tail = bridge.stderr_tail.strip()
        message = f"Provider {bridge.provider_id!r} {verb} ({status.describe()})" + (
            f"\nstderr: {tail}" if tail else ""
        )
        for thread_id in list(self.threads_of(bridge)):
            events = self.release(thread_id, bridge, Cause.BRIDGE_EXITED, message)
            if events:
                log.warning("settled open work of a dead bridge", threadId=thread_id, providerId=bridge.provider_id)
                self._fanout.publish(thread_id, bridge.provider_id, events)
                self._output.advise(bridge, thread_id, message)

    async def on_watchdog(self, bridge: BridgeProcess, events: list[Event]) -> None:
        for event in events:
            log.warning("watchdog fired", code=event["code"], threadId=event["threadId"], providerId=bridge.provider_id)
            self._fanout.publish(event["threadId"], bridge.provider_id, [event])
