"""Turn-start and turn-stall watchdogs (daemon.md §5, protocol.md §9.7), pure.

The daemon's timers call `sweep(now)`; everything else is fed from the
request path (`turn_dispatched`) and the delivered events (`observe`). Times
are seconds on the daemon's clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from bbridge.core.events import Event


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5)


@dataclass
class _PendingStart:
    since: float
    fired: bool = False


@dataclass
class OpenTurn:
    turn_id: str
    started: float
    last_activity: float
    warned: bool = False


Waiting = Callable[[str], "tuple[str, float] | None"]  # a thread's oldest pending request: kind, age


class Watchdogs:
    OBSERVED_TYPES: ClassVar[frozenset[str]] = frozenset({"turn/started", "turn/completed", "provider/error"})
    """The event types `observe` acts on; it ignores every other."""

    def __init__(self, start_timeout_s: float = 120.0, stall_timeout_s: float = 600.0) -> None:
        self.start_timeout_s = start_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self._starts: dict[str, _PendingStart] = {}
        self._turns: dict[str, dict[str, OpenTurn]] = {}
        self._heard: dict[str, float] = {}  # last traffic per thread with turns, applied to them by `sweep`

    def turn_dispatched(self, thread_id: str, now: float) -> None:
        self._starts[thread_id] = _PendingStart(now)

    def dispatch_failed(self, thread_id: str) -> None:
        self._starts.pop(thread_id, None)

    def forget(self, thread_id: str) -> None:
        self._starts.pop(thread_id, None)
        self._turns.pop(thread_id, None)
        self._heard.pop(thread_id, None)

    def traffic(self, thread_ids: Iterable[str], now: float) -> None:
        """Any bridge traffic for a thread re-arms its stall timers (per read: one store each, `sweep` applies it)."""
        for thread_id in thread_ids:
            if thread_id in self._turns:
                self._heard[thread_id] = now

    def observe(self, thread_id: str, event: Event, now: float) -> OpenTurn | None:
        """Feed one lifecycle event; returns the turn a `turn/completed` closed (its duration is `now - started`)."""
        kind = event["type"]
        if kind == "turn/started" or kind == "turn/completed":
            self._starts.pop(thread_id, None)
            if event["scope"]["kind"] == "turn":
                turn_id = event["scope"]["turnId"]
                if kind == "turn/started":
                    self._turns.setdefault(thread_id, {})[turn_id] = OpenTurn(turn_id, now, now)
                else:
                    return self._turns.get(thread_id, {}).pop(turn_id, None)
        elif kind == "provider/error" and event.get("willRetry") is not True:
            self._starts.pop(thread_id, None)
        return None

    def pending_start(self, thread_id: str) -> bool:
        return thread_id in self._starts

    def open_turn(self, thread_id: str) -> OpenTurn | None:
        """The thread's newest open turn, its last activity brought up to the latest traffic."""
        turns = self._turns.get(thread_id)
        if not turns:
            return None
        turn = next(reversed(turns.values()))
        heard = self._heard.get(thread_id)
        if heard is not None and heard > turn.last_activity:
            turn.last_activity, turn.warned = heard, False
        return turn

    def sweep(self, now: float, waiting: Waiting = lambda thread_id: None) -> list[Event]:
        """Events due now: at most one per stalled dispatch, one per silent turn until traffic.

        A turn whose thread waits on a client (`waiting`: an approval, a question, a tool call) is not stalled:
        its warning says what it waits on and for how long, with code `turn_waiting_on_client`."""
        out: list[Event] = []
        for thread_id, pending in self._starts.items():
            if not pending.fired and now - pending.since >= self.start_timeout_s:
                pending.fired = True
                seconds = _round_half_up(self.start_timeout_s)
                out.append(
                    {
                        "type": "system/error",
                        "threadId": thread_id,
                        "scope": {"kind": "thread"},
                        "code": "provider_turn_start_timeout",
                        "message": f"The provider accepted a turn but did not start it within {seconds}s. "
                        "The request may be stalled; stopping the thread interrupts it.",
                    }
                )
        for thread_id, turns in self._turns.items():
            heard = self._heard.get(thread_id)
            for turn_id, turn in turns.items():
                if heard is not None and heard > turn.last_activity:
                    turn.last_activity, turn.warned = heard, False
                silent = now - turn.last_activity
                if not turn.warned and silent >= self.stall_timeout_s:
                    turn.warned = True
                    wait = waiting(thread_id)
                    if wait is not None:
                        kind, age = wait[0].replace("_", " "), _round_half_up(wait[1])
                        message = (
                            f"Turn {turn_id} is waiting on a client to answer a {kind} (pending for {age}s); "
                            "the provider is not stalled. Answer it with interaction/respond (see thread/pending)."
                        )
                        details = {"waitingOn": "client", "kind": wait[0], "pendingS": age}
                        code = "turn_waiting_on_client"
                    else:
                        message = (
                            f"Turn {turn_id} has had no provider traffic for {_round_half_up(silent)}s; "
                            "it stays open until the provider settles it or the thread is stopped."
                        )
                        details = {"waitingOn": "provider", "silentS": _round_half_up(silent)}
                        code = "provider_turn_stalled"
                    out.append(
                        {
                            "type": "system/warning",
                            "threadId": thread_id,
                            "scope": {"kind": "thread"},
                            "code": code,
                            "message": message,
                            "turnId": turn_id,
                            "details": details,
                        }
                    )
        return out
