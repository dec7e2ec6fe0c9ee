"""Watchdog timing logic (pure), plus the sweep loop under trio's autojump clock."""

from __future__ import annotations

import trio
import trio.testing

from bbridge.daemon.threads import ThreadRegistry
from bbridge.daemon.tracker import Tracker
from bbridge.daemon.watchdog import Watchdogs


def watchdogs(
    start_timeout_s: float = 120.0, stall_timeout_s: float = 600.0, heard: dict[str, float] | None = None
) -> Watchdogs:
    """A bridge's watchdogs over a registry of their own; `heard`: each thread's latest traffic (ms), as its
    bridge's assembler would note it."""
    return Watchdogs(ThreadRegistry(Tracker()), start_timeout_s, stall_timeout_s, ({} if heard is None else heard).get)


def started(thread: str, turn: str) -> dict[str, object]:
    return {"type": "turn/started", "threadId": thread, "scope": {"kind": "turn", "turnId": turn}}


def completed(thread: str, turn: str) -> dict[str, object]:
    return {
        "type": "turn/completed",
        "threadId": thread,
        "scope": {"kind": "turn", "turnId": turn},
        "status": "completed",
    }


def test_turn_start_fires_once_per_stalled_dispatch_at_the_threshold() -> None:
    dogs = watchdogs(start_timeout_s=120)
    dogs.turn_dispatched("t", 0)
    assert dogs.sweep(119.9) == []
    fired = dogs.sweep(120)
    assert [e["code"] for e in fired] == ["provider_turn_start_timeout"]
    assert fired[0]["message"].startswith("The provider accepted a turn but did not start it within 120s.")
    assert fired[0]["scope"] == {"kind": "thread"} and "providerThreadId" not in fired[0]
    assert dogs.sweep(1000) == []
    dogs.turn_dispatched("t", 1000)  # a new dispatch re-arms
    assert len(dogs.sweep(1120)) == 1


def test_turn_start_is_cleared_by_started_completed_or_a_final_error() -> None:
    registry = ThreadRegistry(Tracker())
    dogs = Watchdogs(registry, start_timeout_s=10)
    for clear in (started("t", "a"), completed("t", "a"), {"type": "provider/error", "message": "x"}):
        dogs.turn_dispatched("t", 0)
        dogs.observe("t", clear, 1)
        assert dogs.sweep(100) == [] and not registry.liveness("t", 100).start_pending
    dogs.turn_dispatched("t", 0)
    dogs.observe("t", {"type": "provider/error", "message": "x", "willRetry": True}, 1)
    assert len(dogs.sweep(100)) == 1


def test_threshold_is_rounded_half_up_in_the_message() -> None:
    dogs = watchdogs(start_timeout_s=2.5)
    dogs.turn_dispatched("t", 0)
    assert "within 3s" in dogs.sweep(3)[0]["message"]


def test_stall_warns_once_and_traffic_rearms() -> None:
    heard: dict[str, float] = {}
    dogs = watchdogs(stall_timeout_s=600, heard=heard)
    dogs.observe("t", started("t", "a"), 0)
    assert dogs.sweep(599) == []
    warned = dogs.sweep(600)
    assert [e["code"] for e in warned] == ["provider_turn_stalled"] and warned[0]["turnId"] == "a"
    assert dogs.sweep(900) == []
    heard["t"] = 900_000.0
    assert dogs.sweep(1499) == [] and len(dogs.sweep(1500)) == 1
    dogs.observe("t", completed("t", "a"), 1600)
    assert dogs.sweep(10_000) == []


def test_traffic_is_read_from_the_assembler_when_needed_and_kept_when_its_state_goes() -> None:
    """Each thread's turn counts its silence from its latest notification, read from its bridge's assembler by a
    live read or a sweep. What a sweep read stays with the turn when the assembler later lets the state go."""
    registry = ThreadRegistry(Tracker())
    heard: dict[str, float] = {}
    dogs = Watchdogs(registry, 120.0, 600.0, heard.get)
    for thread in ("t", "u"):
        dogs.observe(thread, started(thread, "a"), 0)
    heard.update(t=7_000.0, u=9_000.0)
    assert registry.liveness("u", 10).silence_s == 1 and registry.liveness("t", 10).silence_s == 3
    heard["t"] = 11_000.0
    assert dogs.sweep(605) == []
    del heard["t"]  # evicted: what the sweep read is kept
    assert [e["threadId"] for e in dogs.sweep(609)] == ["u"]
    assert dogs.sweep(610) == []
    assert [e["threadId"] for e in dogs.sweep(611)] == ["t"]


def test_forget_drops_everything_for_a_thread() -> None:
    dogs = watchdogs(start_timeout_s=1, stall_timeout_s=1)
    dogs.turn_dispatched("t", 0)
    dogs.observe("t", started("t", "a"), 0)
    dogs.forget("t")
    assert dogs.sweep(100) == []


async def test_a_sweep_loop_fires_on_the_autojump_clock(autojump_clock: trio.testing.MockClock) -> None:
    dogs = watchdogs(start_timeout_s=120)
    fired: list[dict[str, object]] = []
    dogs.turn_dispatched("t", trio.current_time())

    async def sweeper() -> None:
        while not fired:
            await trio.sleep(15)
            fired.extend(dogs.sweep(trio.current_time()))

    start = trio.current_time()
    await sweeper()
    assert 120 <= trio.current_time() - start <= 135 and len(fired) == 1
