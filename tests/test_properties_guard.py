"""Property tests over the host-side grammar guard (assembler.md §13)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bbridge.core.guard import Guard
from tests.delta_streams import Event, Picks

# -- the guard ------------------------------------------------------------------------------

GUARD_TYPES = (
    "turn/started", "turn/completed", "item/started", "item/completed", "item/backgroundTask/completed",
    "item/delegation/completed", "item/agentMessage/delta", "item/commandExecution/outputDelta",
    "item/toolCall/progress", "item/backgroundTask/progress", "item/delegation/progress", "provider/error",
)  # fmt: skip


def guard_event(data: bytes) -> Event:
    p = Picks(data)
    kind = p.pick(GUARD_TYPES)
    ident = p.pick(("a", "b", "c"))
    event: Event = {"type": kind, "threadId": p.pick(("", "t2")), "providerThreadId": ""}
    if kind.startswith("turn/"):
        event["scope"] = {"kind": "turn", "turnId": ident} if p.index(6) else {"kind": "thread"}
    elif kind.endswith(("started", "completed")) or kind in (
        "item/backgroundTask/progress",
        "item/delegation/progress",
    ):
        event["scope"] = {"kind": "thread"}
        event["item"] = {"type": "x", "id": ident}
    elif kind.startswith("item/"):
        event["scope"] = {"kind": "turn", "turnId": "T"}
        event["itemId"] = ident
    else:
        event["scope"] = {"kind": "thread"}
    assert p.span <= 2 ** (8 * GUARD_EVENT_BYTES - 32)
    return event


GUARD_EVENT_BYTES = 6  # 8.8 bits of choices (type, id, thread, scope) and 32 spare, as for a stream's steps
GUARD_EVENTS = st.binary(min_size=GUARD_EVENT_BYTES, max_size=GUARD_EVENT_BYTES).map(guard_event)


@settings(max_examples=max(300, settings.default.max_examples), deadline=None)
@given(events=st.lists(GUARD_EVENTS, max_size=40))
def test_guard_violations_leave_state_untouched(events: list[Event]) -> None:
    """Dropping any one violating event changes no other verdict: a violation never changes state (§13)."""
    guard = Guard()
    verdicts = [guard.observe(event) for event in events]
    for k, verdict in enumerate(verdicts):
        if verdict is None:
            continue
        without = Guard()
        assert [without.observe(e) for e in events[:k] + events[k + 1 :]] == verdicts[:k] + verdicts[k + 1 :]


def test_guard_item_sets_are_bounded_to_512() -> None:
    guard = Guard()
    for n in range(513):
        assert guard.observe({"type": "item/started", "threadId": "", "item": {"id": f"i{n}"}}) is None
    delta = {"type": "item/plan/delta", "threadId": "", "itemId": "i0", "delta": "x"}
    assert guard.observe(delta) is not None  # the oldest open id was trimmed
    assert guard.observe({**delta, "itemId": "i1"}) is None
    for n in range(513):
        assert guard.observe({"type": "item/completed", "threadId": "", "item": {"id": f"s{n}"}}) is None
    assert guard.observe({"type": "item/completed", "threadId": "", "item": {"id": "s0"}}) is None  # forgotten
    assert guard.observe({"type": "item/completed", "threadId": "", "item": {"id": "s512"}}) is not None
