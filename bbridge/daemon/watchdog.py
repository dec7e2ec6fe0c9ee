"""Turn-start and turn-stall watchdogs (daemon.md §5, protocol.md §9.7), pure.

A thread's watchdog state (`Watch`: its dispatched turn not yet started, its open turns, and where its traffic
is read) is kept in its record (`threads.ThreadRecord.watch`) while something is armed (a dispatched or open
turn); `Watchdogs` is one bridge's sweeper, with its provider's timeouts, over the threads it armed (`watched`),
and drops a thread's watch when its last turn settles. The daemon's timers call `sweep(now)`; everything else is
fed from the request path (`turn_dispatched`) and the delivered events (`observe`). A thread's traffic is not fed
at all: the bridge's assembler notes each thread's latest notification on the thread's state, which a delta
reaches anyway (`Assembler.heard_at`), and a sweep or a live read brings the open turns up to it (nothing per
delta). A thread no client
constructed (a `turn/start` on a thread the daemon never constructed, a thread learnt from `thread/identity`) gets
its record made here when it is armed (`ThreadRegistry.record`). Since the watchdogs see every dispatch and turn
event, they also keep a thread's idle-since for idle reaping (`Slot.idle_since`, protocol.md §4.7: cleared by a
dispatch and a `turn/started`; set when a turn completes, a provider error will not be retried or a dispatch fails
and nothing is left armed). Times are seconds on the daemon's clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from bbridge.core.events import Event
from bbridge.daemon.pending import Pending

HeardAt = Callable[[str], float | None]
"""When its bridge last sent a notification for a thread, in ms of the daemon's clock (`Assembler.heard_at`)."""


def _never(thread_id: str) -> float | None:
    return None


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5)


@dataclass(slots=True)
class PendingStart:
    since: float
    fired: bool = False


@dataclass(slots=True)
class OpenTurn:
    turn_id: str
    started: float
    last_activity: float
    warned: bool = False


@dataclass(eq=False, slots=True)
class Watch:
    """One thread's watchdog state, kept in its record until `release` clears it."""

    thread_id: str = ""
    heard_at: HeardAt = _never  # its traffic: the arming bridge's assembler's
    start: PendingStart | None = None  # a dispatched turn the provider has not started yet
    turns: dict[str, OpenTurn] = field(default_factory=dict)  # its open turns, oldest first

    def heard(self) -> float | None:
        """When its bridge last sent a notification for the thread (seconds), if its assembler still holds it."""
        ms = self.heard_at(self.thread_id)
        return None if ms is None else ms / 1000

    def open_turn(self) -> OpenTurn | None:
        """The newest open turn, its last activity brought up to the latest traffic."""
        if not self.turns:
            return None
        turn = next(reversed(self.turns.values()))
        self.catch_up(turn, self.heard())
        return turn

    @staticmethod
    def catch_up(turn: OpenTurn, heard: float | None) -> None:
        """Traffic since the turn's last activity re-arms its stall timer."""
        if heard is not None and heard > turn.last_activity:
            turn.last_activity, turn.warned = heard, False


class Slot(Protocol):
    """A thread's record as the watchdogs use it (`threads.ThreadRecord`): where its watch is kept, and the
    requests it waits on a person for (a turn waiting on a client is not stalled)."""

    thread_id: str
    watch: Watch | None
    idle_since: float | None  # since when nothing is dispatched or open on it (idle reaping, protocol.md §4.7)

    @property
    def pending(self) -> Mapping[str, Pending]: ...


class Slots(Protocol):
    """The thread records (`threads.ThreadRegistry`): a thread's, made on first use for a thread no client
    constructed, and dropped again once it holds nothing."""

    def record(self, thread_id: str) -> Slot: ...

    def get(self, thread_id: str) -> Slot | None: ...

    def drop_if_empty(self, thread_id: str) -> None: ...


class Watchdogs:
    OBSERVED_TYPES: ClassVar[frozenset[str]] = frozenset({"turn/started", "turn/completed", "provider/error"})
    """The event types `observe` acts on; it ignores every other."""

    def __init__(
        self,
        threads: Slots,
        start_timeout_s: float = 120.0,
        stall_timeout_s: float = 600.0,
        heard_at: HeardAt = _never,
    ) -> None:
        self.start_timeout_s = start_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.watched: dict[str, None] = {}  # the threads this bridge armed, in order; their state is their records'
        self._threads = threads
        self._heard_at = heard_at

    def _arm(self, thread_id: str) -> Watch:
        """The thread's watch (made, with its record if it has none), swept by this bridge from now on."""
        record = self._threads.record(thread_id)
        watch = record.watch
        if watch is None:
            watch = record.watch = Watch(thread_id, self._heard_at)
        self.watched[thread_id] = None
        return watch

    def _disarm(self, thread_id: str, turn_id: str | None = None) -> OpenTurn | None:
        """The thread's dispatched turn is settled (and `turn_id` closed, returned); a watch left with nothing armed
        goes from its record, and the bridge stops sweeping the thread."""
        record = self._threads.get(thread_id)
        watch = None if record is None else record.watch
        if record is None or watch is None:
            return None
        watch.start = None
        closed = None if turn_id is None else watch.turns.pop(turn_id, None)
        if not watch.turns:
            record.watch = None
            self.watched.pop(thread_id, None)
            self._threads.drop_if_empty(thread_id)
        return closed

    def turn_dispatched(self, thread_id: str, now: float) -> None:
        self._arm(thread_id).start = PendingStart(now)
        self._threads.record(thread_id).idle_since = None

    def dispatch_failed(self, thread_id: str, now: float | None = None) -> None:
        self._disarm(thread_id)
        self._idle(thread_id, now)

    def _idle(self, thread_id: str, now: float | None) -> None:
        """Nothing is dispatched or open on the thread any more: its session is idle from `now` (protocol.md §4.7's
        idle-since: set after a construction, a turn's end, a provider error that will not be retried)."""
        record = self._threads.get(thread_id)
        if record is not None and record.watch is None and now is not None:
            record.idle_since = now

    def forget(self, thread_id: str) -> None:
        """This bridge no longer sweeps the thread (a release: `ThreadRegistry.let_go` clears its watch)."""
        self.watched.pop(thread_id, None)

    def observe(self, thread_id: str, event: Event, now: float) -> OpenTurn | None:
        """Feed one lifecycle event; returns the turn a `turn/completed` closed (its duration is `now - started`)."""
        kind = event["type"]
        if kind == "turn/started" or kind == "turn/completed":
            scope = event["scope"]
            turn_id = scope["turnId"] if scope["kind"] == "turn" else None
            if kind == "turn/completed" or turn_id is None:
                closed = self._disarm(thread_id, turn_id)
                self._idle(thread_id, now)
                return closed
            watch = self._arm(thread_id)
            watch.start = None
            watch.turns[turn_id] = OpenTurn(turn_id, now, now)
            self._threads.record(thread_id).idle_since = None
        elif kind == "provider/error" and event.get("willRetry") is not True:
            self._disarm(thread_id)
            self._idle(thread_id, now)
        return None

    def sweep(self, now: float) -> list[Event]:
        """Events due now: at most one per stalled dispatch, one per silent turn until traffic (the dispatches
        first). A thread whose watch went (released meanwhile from another bridge) is no longer swept.

        A turn whose thread waits on a client (its record's pending requests: an approval, a question, a tool
        call) is not stalled: its warning says what it waits on and for how long, with code
        `turn_waiting_on_client`."""
        armed: list[tuple[Slot, Watch]] = []
        for thread_id in list(self.watched):
            record = self._threads.get(thread_id)
            watch = None if record is None else record.watch
            if record is None or watch is None:
                del self.watched[thread_id]
            else:
                armed.append((record, watch))
        out: list[Event] = []
        for record, watch in armed:
            start = watch.start
            if start is not None and not start.fired and now - start.since >= self.start_timeout_s:
                start.fired = True
                seconds = _round_half_up(self.start_timeout_s)
                out.append(
                    {
                        "type": "system/error",
                        "threadId": record.thread_id,
                        "scope": {"kind": "thread"},
                        "code": "provider_turn_start_timeout",
                        "message": f"The provider accepted a turn but did not start it within {seconds}s. "
                        "The request may be stalled; stopping the thread interrupts it.",
                    }
                )
        for record, watch in armed:
            heard = watch.heard() if watch.turns else None
            for turn_id, turn in watch.turns.items():
                watch.catch_up(turn, heard)
                silent = now - turn.last_activity
                if not turn.warned and silent >= self.stall_timeout_s:
                    turn.warned = True
                    out.append(_silent_turn(record, turn_id, silent, now))
        return out


def _silent_turn(record: Slot, turn_id: str, silent: float, now: float) -> Event:
    """The warning for a turn silent `silent` seconds: waiting on a client (its oldest pending request), or on
    the provider."""
    oldest = next(iter(record.pending.values()), None)
    if oldest is not None:
        kind, age = oldest.kind.replace("_", " "), _round_half_up(now - oldest.opened)
        message = (
            f"Turn {turn_id} is waiting on a client to answer a {kind} (pending for {age}s); "
            "the provider is not stalled. Answer it with interaction/respond (see thread/pending)."
        )
        details: dict[str, object] = {"waitingOn": "client", "kind": oldest.kind, "pendingS": age}
        code = "turn_waiting_on_client"
    else:
        message = (
            f"Turn {turn_id} has had no provider traffic for {_round_half_up(silent)}s; "
            "it stays open until the provider settles it or the thread is stopped."
        )
        details = {"waitingOn": "provider", "silentS": _round_half_up(silent)}
        code = "provider_turn_stalled"
    return {
        "type": "system/warning",
        "threadId": record.thread_id,
        "scope": {"kind": "thread"},
        "code": code,
        "message": message,
        "turnId": turn_id,
        "details": details,
    }
