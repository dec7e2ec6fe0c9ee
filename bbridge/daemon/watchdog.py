"""Turn-start and turn-stall watchdogs (daemon.md §5, protocol.md §9.7), pure.

A thread's watchdog state (`Watch`: its dispatched turn not yet started, its open turns, when its bridge was
last heard from) is kept in its record (`threads.ThreadRecord.watch`); `Watchdogs` is one bridge's sweeper, with
its provider's timeouts, over the threads it armed (`watched`). The daemon's timers call `sweep(now)`;
everything else is fed from the request path (`turn_dispatched`) and the delivered events (`observe`,
`traffic`). A thread no client constructed (a `turn/start` on a thread the daemon never constructed, a thread
learnt from `thread/identity`) gets its record made here when it is armed (`ThreadRegistry.record`). Times are
seconds on the daemon's clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from bbridge.core.events import Event

if TYPE_CHECKING:
    from bbridge.daemon.threads import ThreadRecord, ThreadRegistry


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5)


@dataclass
class PendingStart:
    since: float
    fired: bool = False


@dataclass
class OpenTurn:
    turn_id: str
    started: float
    last_activity: float
    warned: bool = False


@dataclass(eq=False)
class Watch:
    """One thread's watchdog state, kept in its record until `release` clears it."""

    start: PendingStart | None = None  # a dispatched turn the provider has not started yet
    turns: dict[str, OpenTurn] = field(default_factory=dict)  # its open turns, oldest first
    heard: float | None = None  # its latest traffic while a turn was open, applied to the turns when read

    def open_turn(self) -> OpenTurn | None:
        """The newest open turn, its last activity brought up to the latest traffic."""
        if not self.turns:
            return None
        turn = next(reversed(self.turns.values()))
        heard = self.heard
        if heard is not None and heard > turn.last_activity:
            turn.last_activity, turn.warned = heard, False
        return turn


class Watchdogs:
    OBSERVED_TYPES: ClassVar[frozenset[str]] = frozenset({"turn/started", "turn/completed", "provider/error"})
    """The event types `observe` acts on; it ignores every other."""

    def __init__(self, threads: ThreadRegistry, start_timeout_s: float = 120.0, stall_timeout_s: float = 600.0) -> None:
        self.start_timeout_s = start_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.watched: dict[str, None] = {}  # the threads this bridge armed, in order; their state is their records'
        self._threads = threads
        self._records = threads.records

    def _arm(self, thread_id: str) -> Watch:
        """The thread's watch (made, with its record if it has none), swept by this bridge from now on."""
        record = self._threads.record(thread_id)
        watch = record.watch
        if watch is None:
            watch = record.watch = Watch()
        self.watched[thread_id] = None
        return watch

    def _watch(self, thread_id: str) -> Watch | None:
        record = self._records.get(thread_id)
        return None if record is None else record.watch

    def turn_dispatched(self, thread_id: str, now: float) -> None:
        self._arm(thread_id).start = PendingStart(now)

    def dispatch_failed(self, thread_id: str) -> None:
        if (watch := self._watch(thread_id)) is not None:
            watch.start = None

    def forget(self, thread_id: str) -> None:
        """This bridge no longer sweeps the thread (`ThreadRegistry.release` clears its state)."""
        self.watched.pop(thread_id, None)

    def traffic(self, thread_ids: Iterable[str], now: float) -> None:
        """Any bridge traffic for a thread re-arms its stall timers (per read: one store each, `sweep` applies it)."""
        records = self._records
        for thread_id in thread_ids:
            record = records.get(thread_id)
            if record is not None and (watch := record.watch) is not None and watch.turns:
                watch.heard = now

    def observe(self, thread_id: str, event: Event, now: float) -> None:
        kind = event["type"]
        if kind == "turn/started" or kind == "turn/completed":
            watch = self._arm(thread_id) if kind == "turn/started" else self._watch(thread_id)
            if watch is None:
                return
            watch.start = None
            if event["scope"]["kind"] == "turn":
                turn_id = event["scope"]["turnId"]
                if kind == "turn/started":
                    watch.turns[turn_id] = OpenTurn(turn_id, now, now)
                else:
                    watch.turns.pop(turn_id, None)
        elif kind == "provider/error" and event.get("willRetry") is not True and (watch := self._watch(thread_id)):
            watch.start = None

    def sweep(self, now: float) -> list[Event]:
        """Events due now: at most one per stalled dispatch, one per silent turn until traffic (the dispatches
        first). A thread with nothing armed any more is no longer swept.

        A turn whose thread waits on a client (its record's pending requests: an approval, a question, a tool
        call) is not stalled: its warning says what it waits on and for how long, with code
        `turn_waiting_on_client`."""
        armed: list[tuple[ThreadRecord, Watch]] = []
        for thread_id in list(self.watched):
            record = self._records.get(thread_id)
            watch = None if record is None else record.watch
            if record is None or watch is None or (watch.start is None and not watch.turns):
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
            heard = watch.heard
            for turn_id, turn in watch.turns.items():
                if heard is not None and heard > turn.last_activity:
                    turn.last_activity, turn.warned = heard, False
                silent = now - turn.last_activity
                if not turn.warned and silent >= self.stall_timeout_s:
                    turn.warned = True
                    out.append(_silent_turn(record, turn_id, silent, now))
        return out


def _silent_turn(record: ThreadRecord, turn_id: str, silent: float, now: float) -> Event:
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
