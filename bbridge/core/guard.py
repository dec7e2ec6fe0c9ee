"""The host-side grammar guard (assembler.md §13).

Watches assembled, thread-stamped events and names the rule an event breaks;
a violating event leaves the state untouched and the caller drops it.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

MAX_ITEM_IDS: Final = 512

RULES: Final = (
    "item/opens-before-delta",
    "item/settles-once",
    "turn/starts-once",
    "turn/settles-once",
    "turn/known",
)

_COMPLETIONS: Final = frozenset({"item/completed", "item/backgroundTask/completed", "item/delegation/completed"})
_SNAPSHOT_PROGRESS: Final = frozenset({"item/backgroundTask/progress", "item/delegation/progress"})
_ITEM_DELTAS: Final = frozenset(
    {
        "item/agentMessage/delta",
        "item/plan/delta",
        "item/commandExecution/outputDelta",
        "item/fileChange/outputDelta",
        "item/reasoning/summaryTextDelta",
        "item/reasoning/textDelta",
        "item/mcpToolCall/progress",
        "item/toolCall/progress",
    }
)


class Violation(NamedTuple):
    rule: str
    reason: str


class _ThreadGrammar:
    __slots__ = ("completed_turns", "open_items", "settled_items", "started_turns")

    def __init__(self) -> None:
        self.open_items: dict[str, None] = {}
        self.settled_items: dict[str, None] = {}
        self.started_turns: set[str] = set()
        self.completed_turns: set[str] = set()


def _add_bounded(ids: dict[str, None], item_id: str) -> None:
    ids[item_id] = None
    while len(ids) > MAX_ITEM_IDS:
        del ids[next(iter(ids))]


class Guard:
    """Per-thread turn and item bookkeeping; `observe` returns None or the broken rule."""

    def __init__(self) -> None:
        self._threads: dict[str, _ThreadGrammar] = {}

    def clear(self) -> None:
        self._threads.clear()

    def clear_thread(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)

    def settled(self, thread_id: str, item_id: str) -> bool:
        """Whether the item completed in the thread (diagnostics: a delta for it reuses a finished item's key)."""
        st = self._threads.get(thread_id)
        return st is not None and item_id in st.settled_items

    def observe(self, event: dict[str, Any]) -> Violation | None:
        kind = event["type"]
        if kind in _ITEM_DELTAS:
            st = self._threads.get(event["threadId"])
            if st is not None and event.get("itemId") in st.open_items:
                return None  # the streaming hot path, without a call
            return self._needs_open(event, kind, event.get("itemId"))
        if kind == "item/started":
            st = self._thread(event)
            item_id = event["item"]["id"]
            _add_bounded(st.open_items, item_id)
            st.settled_items.pop(item_id, None)
            return None
        if kind in _COMPLETIONS:
            st = self._thread(event)
            item_id = event["item"]["id"]
            if item_id in st.settled_items:
                return Violation("item/settles-once", f'{kind} for item "{item_id}", which already settled')
            st.open_items.pop(item_id, None)
            _add_bounded(st.settled_items, item_id)
            return None
        if kind in _SNAPSHOT_PROGRESS:
            return self._needs_open(event, kind, event["item"]["id"])
        if kind == "turn/started":
            return self._turn_started(event)
        if kind == "turn/completed":
            return self._turn_completed(event)
        return None

    def _thread(self, event: dict[str, Any]) -> _ThreadGrammar:
        tid = event["threadId"]
        st = self._threads.get(tid)
        if st is None:
            st = self._threads[tid] = _ThreadGrammar()
        return st

    def _needs_open(self, event: dict[str, Any], kind: str, item_id: Any) -> Violation | None:
        st = self._threads.get(event["threadId"])
        if st is None or item_id not in st.open_items:
            return Violation("item/opens-before-delta", f'{kind} for item "{item_id}" arrived before item/started')
        return None

    def _turn_started(self, event: dict[str, Any]) -> Violation | None:
        scope = event["scope"]
        if scope["kind"] != "turn":
            return None
        turn = scope["turnId"]
        st = self._thread(event)
        if turn in st.completed_turns:
            return Violation("turn/starts-once", f'turn/started for turn "{turn}", which already completed')
        if turn in st.started_turns:
            return Violation("turn/starts-once", f'turn/started for turn "{turn}", which is already open')
        st.started_turns.add(turn)
        return None

    def _turn_completed(self, event: dict[str, Any]) -> Violation | None:
        scope = event["scope"]
        if scope["kind"] != "turn":
            return None
        turn = scope["turnId"]
        st = self._thread(event)
        if turn in st.completed_turns:
            return Violation("turn/settles-once", f'turn/completed for turn "{turn}", which already completed')
        if turn not in st.started_turns:
            return Violation("turn/known", f'turn/completed for turn "{turn}", which never started')
        st.started_turns.discard(turn)
        st.completed_turns.add(turn)
        return None
