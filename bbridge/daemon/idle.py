"""Idle reaping (issue 49; protocol.md §4.7): idle threads released, idle bridges stopped, bridges started early.

Per provider (`config.ProviderConfig`):

* `idle_release_s` (default 1800; 0: never): a thread idle that long is released with `thread/stop {intent:
  "release"}`, let go as a client's release is (`Supervisor.release`, `threads.Cause.IDLE`: its guard, watch,
  membership, tools and the tool host's MCP servers and grants for it, `ToolHost.forget`), and its record remembers
  it (`ThreadRecord.parked`). The next turn on it (`RESUMED_BY`) resumes it first, as a client resumes a thread after
  a restart: `thread/resume` with its latest construction's params as the client sent them and its provider thread
  id, through the daemon's own forwarding (the construction rule offers its hosted tools and starts its MCP servers
  again), then the turn.
* `bridge_idle_exit_s` (default 0: never): a bridge with no live thread that long is stopped by the supervisor's
  usual stop (`Supervisor.stop_idle`); the next request starts another (`Supervisor.bridge`).
* `prestart`: the bridge is spawned and handshaken as the daemon starts, so the first thread does not wait for it.

A thread is a candidate for release (`blockers` lists why one is not, for `daemon/status`) when a client constructed
it (the record keeps the construction and a provider thread id is known), its provider's running bridge serves it,
no request on it is in flight (`ThreadRegistry.busy`, counted by `Daemon._forward` and by this module's own
release), no turn is dispatched or open, no background task or delegation is open (the open work, `Tracker`), it
waits on no person (a pending request) and runs no hosted tool call, and its session is restorable: the latest
`sessionRestorable` of its construction's answer or `thread/identity`, else its bridge's `sessionRestore` capability.
Its idle-since (`ThreadRecord.idle_since`) is set when its session exists with nothing dispatched or open: a
construction answered, a turn completed, a `provider/error` that will not be retried, a failed dispatch; and cleared
by a dispatch and a `turn/started` (`watchdog.Watchdogs`, which sees those events). A bridge is idle when it is ready
and serves, watches and is asked nothing (no member thread, no watched thread, no request in flight, no pending
request of its provider); its idle time runs from when it was last handed out, answered or let a thread go
(`BridgeProcess.last_used`).

One task sweeps (`Reaper.run`), at a quarter of the smallest configured timeout (between `MIN_SWEEP_S` and
`MAX_SWEEP_S`); a release or resume of a thread in flight holds the thread's next requests until it is done
(`Reaper.ready`), so a turn never reaches a session being released.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import structlog
import trio

from bbridge.daemon.bridge import BridgeProcess
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.counters import Counters
from bbridge.daemon.pending import Interactions
from bbridge.daemon.supervisor import Supervisor
from bbridge.daemon.threads import Cause, ThreadRecord, ThreadRegistry
from bbridge.daemon.tracker import Tracker
from bbridge.wire import rpc

log = structlog.get_logger("bbridge.daemon.idle")

# The methods that resume a thread released idle before they are sent: those a bridge serves from a live session.
RESUMED_BY: Final = frozenset({"turn/start", "thread/name/set", "thread/goal/clear"})
# A construction's params a resume does not repeat: the provider thread id is the one it resumes; a fork's source,
# a start's first input and a room's hidden mark (kept on the record) belong to that one construction.
NOT_RESUMED: Final = frozenset(
    {"providerThreadId", "sourceProviderThreadId", "sourceProviderCheckpointId", "input", "hidden"}
)
MIN_SWEEP_S = 0.05
MAX_SWEEP_S = 15.0
RELEASE_TIMEOUT_S = 30.0
RELEASED_IDLE = "released idle"  # the only reason a released thread shows (its next turn resumes it)


def restorable(record: ThreadRecord, bridge: BridgeProcess | None) -> bool:
    """The session's own `sessionRestorable` when it said it, else its bridge's `sessionRestore` capability."""
    if record.restorable is not None:
        return record.restorable
    return bridge is not None and bridge.capabilities.sessionRestore


def blockers(
    thread_id: str,
    record: ThreadRecord,
    bridge: BridgeProcess | None,
    registry: ThreadRegistry,
    tracker: Tracker,
    config: ProviderConfig | None,
) -> list[str]:
    """Why the thread is no candidate for an idle release now (none: it is one, and is released once idle long
    enough); a thread released idle shows only `RELEASED_IDLE`."""
    if record.parked:
        return [RELEASED_IDLE]
    if record.provider_id is None or record.construction is None or not registry.provider_threads.get(thread_id):
        return ["not constructed by a client"]
    reasons = []
    if config is None or config.idle_release_s <= 0:
        reasons.append("idle release off (idle_release_s = 0)")
    if bridge is None or bridge.state != "ready" or thread_id not in bridge.threads:
        reasons.append("no running bridge serves it")
    if registry.busy.get(thread_id):
        reasons.append("a request in flight")
    watch = record.watch
    if watch is not None and watch.start is not None:
        reasons.append("a turn dispatched")
    if (watch is not None and watch.turns) or tracker.open_turns(thread_id):
        reasons.append("a turn open")
    work = tracker.threads().get(thread_id)
    if work is not None and work.open_items:
        reasons.append("open work (a background task or delegation)")
    if record.pending:
        reasons.append("waiting on a client")
    if record.calls:
        reasons.append("a hosted tool call running")
    if not restorable(record, bridge):
        reasons.append("its session cannot be restored")
    if not reasons and record.idle_since is None:
        reasons.append("not idle yet")
    return reasons


def bridge_idle_s(bridge: BridgeProcess, interactions: Interactions, now: float) -> float | None:
    """How long the bridge has had no live thread (None: it has one, a request in flight, or is not ready)."""
    if (
        bridge.state != "ready"
        or bridge.threads
        or bridge.watchdogs.watched
        or bridge.inflight
        or interactions.of_provider(bridge.provider_id)
    ):
        return None
    return max(0.0, now - bridge.last_used)


class Reaper:
    """The sweep that releases idle threads and stops idle bridges, the resume of a thread released idle, and the
    bridges started with the daemon."""

    def __init__(
        self,
        providers: dict[str, ProviderConfig],
        supervisor: Supervisor,
        registry: ThreadRegistry,
        tracker: Tracker,
        interactions: Interactions,
        resolve_thread: Callable[[str, str], Awaitable[None]],  # `Relays.resolve_thread`
        counters: Counters,
    ) -> None:
        self._providers = providers
        self._supervisor = supervisor
        self._registry = registry
        self._tracker = tracker
        self._interactions = interactions
        self._resolve_thread = resolve_thread
        self._counters = counters
        self._moving: dict[str, trio.Event] = {}  # threads being released or resumed, set when done

    # -- a client's requests on a thread ----------------------------------------------------------------------------

    @contextmanager
    def in_flight(self, thread_id: str) -> Iterator[None]:
        """A request on the thread, from before it is sent until it is answered: no idle release meanwhile."""
        busy = self._registry.busy
        busy[thread_id] = busy.get(thread_id, 0) + 1
        try:
            yield
        finally:
            left = busy[thread_id] - 1
            if left:
                busy[thread_id] = left
            else:
                del busy[thread_id]

    async def ready(self, thread_id: str, method: str, resume: Callable[[dict[str, Any]], Awaitable[Any]]) -> None:
        """Before a request on the thread is sent: a release or resume of it in flight is waited for, and a
        `RESUMED_BY` request on a thread released idle resumes it first (`resume` forwards a `thread/resume`); a
        failed resume fails the request, saying so, and the next one tries again."""
        while (moving := self._moving.get(thread_id)) is not None:
            await moving.wait()
        record = self._registry.get(thread_id)
        if method not in RESUMED_BY or record is None or not record.parked:
            return
        params = self.resume_params(thread_id, record)
        if params is None:
            return
        self._moving[thread_id] = done = trio.Event()
        try:
            await resume(params)
        except rpc.RpcError as exc:
            raise rpc.RpcError(
                exc.code,
                f"Thread {thread_id!r} was released after being idle, and resuming it for {method} failed: "
                f"{exc.message}",
                exc.data,
            ) from None
        finally:
            del self._moving[thread_id]
            done.set()
        self._counters.idle_resumes += 1
        log.info("resumed a thread released idle", threadId=thread_id, providerId=record.provider_id, method=method)

    def resume_params(self, thread_id: str, record: ThreadRecord) -> dict[str, Any] | None:
        """`thread/resume`'s params for a thread released idle: its latest construction's, on its provider and
        provider thread (protocol.md §3.3.6: session construction + `providerThreadId`)."""
        provider_thread_id = self._registry.provider_threads.get(thread_id)
        if record.construction is None or record.provider_id is None or not provider_thread_id:
            return None
        params = {key: value for key, value in record.construction.items() if key not in NOT_RESUMED}
        params.update(providerId=record.provider_id, providerThreadId=provider_thread_id)
        return params

    # -- the sweep ------------------------------------------------------------------------------------------------------

    def interval(self) -> float | None:
        """How often the sweep runs (None: no provider reaps anything)."""
        timeouts = [
            seconds
            for config in self._providers.values()
            for seconds in (config.idle_release_s, config.bridge_idle_exit_s)
            if seconds > 0
        ]
        return None if not timeouts else min(MAX_SWEEP_S, max(MIN_SWEEP_S, min(timeouts) / 4))

    async def run(self) -> None:
        """Sweep until cancelled (the daemon's nursery)."""
        interval = self.interval()
        if interval is None:
            return
        while True:
            await trio.sleep(interval)
            await self.sweep(trio.current_time())

    async def sweep(self, now: float) -> None:
        """Release every thread idle past its provider's `idle_release_s`, then stop every bridge idle past its
        `bridge_idle_exit_s` (a thread released now leaves its bridge busy until then: its idle time starts now)."""
        async with trio.open_nursery() as nursery:
            for thread_id in list(self._registry.records):
                if self._due(thread_id, now) is not None:
                    nursery.start_soon(self.release, thread_id)
        for provider_id, bridge in list(self._supervisor.bridges.items()):
            limit = self._providers[provider_id].bridge_idle_exit_s
            idle = bridge_idle_s(bridge, self._interactions, now)
            if (
                limit > 0
                and idle is not None
                and idle >= limit
                and await self._supervisor.stop_idle(bridge, self._still_idle)
            ):
                self._counters.idle_bridge_stops += 1
                log.info("stopped an idle bridge", providerId=provider_id, idleS=round(idle, 3))

    def _still_idle(self, bridge: BridgeProcess) -> bool:
        limit = self._providers[bridge.provider_id].bridge_idle_exit_s
        idle = bridge_idle_s(bridge, self._interactions, trio.current_time())
        return limit > 0 and idle is not None and idle >= limit

    def _due(self, thread_id: str, now: float) -> BridgeProcess | None:
        """The bridge to release the thread from, when it is a candidate idle past its provider's limit."""
        record = self._registry.get(thread_id)
        if record is None or record.provider_id is None or record.idle_since is None or thread_id in self._moving:
            return None
        config = self._providers.get(record.provider_id)
        bridge = self._supervisor.bridges.get(record.provider_id)
        if config is None or config.idle_release_s <= 0 or now - record.idle_since < config.idle_release_s:
            return None
        if blockers(thread_id, record, bridge, self._registry, self._tracker, config):
            return None
        return bridge

    async def release(self, thread_id: str) -> None:
        """Release the thread if it is still due (checked again: a request may have come meanwhile); a release its
        bridge refuses is logged, and tried again after another idle period."""
        now = trio.current_time()
        bridge = self._due(thread_id, now)
        record = self._registry.get(thread_id)
        if bridge is None or record is None or record.idle_since is None:
            return
        idle_s = now - record.idle_since
        self._moving[thread_id] = done = trio.Event()
        try:
            with self.in_flight(thread_id):
                await self._resolve_thread(thread_id, "the thread was released idle")
                params = {
                    "threadId": thread_id,
                    "providerThreadId": self._registry.provider_threads.get(thread_id),
                    "intent": "release",
                    "activeTurnId": None,
                }

                def answered(raw: object, target: BridgeProcess = bridge) -> None:  # in the bridge's reader
                    self._supervisor.release(thread_id, target, Cause.IDLE)

                await bridge.request("thread/stop", params, RELEASE_TIMEOUT_S, on_result=answered)
            self._counters.idle_releases += 1
            log.info(
                "released an idle thread", threadId=thread_id, providerId=bridge.provider_id, idleS=round(idle_s, 3)
            )
        except rpc.RpcError as exc:
            record.idle_since = trio.current_time()
            log.warning(
                "an idle thread's release failed; tried again after another idle period",
                threadId=thread_id,
                providerId=bridge.provider_id,
                error=exc.message,
            )
        finally:
            del self._moving[thread_id]
            done.set()

    # -- bridges started with the daemon ----------------------------------------------------------------------------

    async def prestart(self) -> None:
        """Spawn and handshake every provider with `prestart` (a failure is logged; `daemon/status` shows it as
        `failed: <reason>` and the next request tries again)."""
        async with trio.open_nursery() as nursery:
            for provider_id, config in self._providers.items():
                if config.prestart:
                    nursery.start_soon(self._prestart, provider_id)

    async def _prestart(self, provider_id: str) -> None:
        try:
            await self._supervisor.bridge(provider_id)
        except rpc.RpcError as exc:
            log.warning("a prestarted bridge did not start", providerId=provider_id, error=exc.message)
        else:
            log.info("prestarted a bridge", providerId=provider_id)
