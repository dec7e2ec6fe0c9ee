"""What each thread's delivered timeline shows as open (pure).

The daemon feeds every delivered event here. It answers `daemon/status`
(open turns, open items) and, when a bridge dies, builds the events that
settle its threads' open work as `failed` — the assembler itself keeps no
status for keyed provider turns, so only the delivered timeline knows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from bbridge.core.events import Event, scope
from bbridge.core.items import echo_item, text_item

_ITEM_COMPLETIONS = frozenset({"item/completed", "item/backgroundTask/completed", "item/delegation/completed"})


def _thread_attached(item: dict[str, Any]) -> bool:
    return item["type"] == "backgroundTask" or (item["type"] == "delegation" and item.get("background") is True)


@dataclass
class ThreadWork:
    open_turns: dict[str, None] = field(default_factory=dict)
    open_items: dict[str, tuple[dict[str, Any], dict[str, str]]] = field(default_factory=dict)

    def idle(self) -> bool:
        return not self.open_turns and not self.open_items


class Tracker:
    OBSERVED_TYPES: ClassVar[frozenset[str]] = (
        frozenset({"turn/started", "turn/completed", "item/started"}) | _ITEM_COMPLETIONS
    )
    """The event types `observe` acts on; it ignores every other."""

    def __init__(self) -> None:
        self._threads: dict[str, ThreadWork] = {}

    def work(self, thread_id: str) -> ThreadWork:
        work = self._threads.get(thread_id)
        if work is None:
            work = self._threads[thread_id] = ThreadWork()
        return work

    def observe(self, thread_id: str, event: Event) -> None:
        kind = event["type"]
        if kind == "turn/started":
            if event["scope"]["kind"] == "turn":
                self.work(thread_id).open_turns[event["scope"]["turnId"]] = None
        elif kind == "turn/completed":
            work = self._threads.get(thread_id)
            if work is not None and event["scope"]["kind"] == "turn":
                turn = event["scope"]["turnId"]
                work.open_turns.pop(turn, None)
                # a settled turn forgets its unsettled items, as the assembler does
                for item_id, (item, item_scope) in list(work.open_items.items()):
                    if item_scope.get("turnId") == turn and not _thread_attached(item):
                        del work.open_items[item_id]
        elif kind == "item/started":
            item = event["item"]
            self.work(thread_id).open_items[item["id"]] = (item, event["scope"])
        elif kind in _ITEM_COMPLETIONS:
            work = self._threads.get(thread_id)
            if work is not None:
                work.open_items.pop(event["item"]["id"], None)

    def open_turns(self, thread_id: str) -> list[str]:
        work = self._threads.get(thread_id)
        return [] if work is None else list(work.open_turns)

    def threads(self) -> dict[str, ThreadWork]:
        return self._threads

    def settle_failed(
        self, thread_id: str, provider_thread_id: str, message: str, streamed: dict[str, tuple[str, str]] | None = None
    ) -> list[Event]:
        """Events that settle a dead bridge's open work: the error, each item, each turn.

        Status-bearing items end `failed`; text items keep what was streamed into them (`streamed`, by item id).
        """
        work = self._threads.pop(thread_id, None)
        if work is None or work.idle():
            return []
        error: Event = {
            "type": "provider/error", "threadId": thread_id, "providerThreadId": provider_thread_id,
            "scope": scope(None), "message": message,
        }  # fmt: skip
        events: list[Event] = [error]
        for item, item_scope in work.open_items.values():
            text = (streamed or {}).get(item["id"])
            settled = text_item(item, *text) if text is not None else None
            if settled is None:
                settled = echo_item(item, "failed", None, None)
            if settled is item and "status" in item:
                settled = {**item, "status": "failed"}
            if _thread_attached(item):
                kind = (
                    "item/backgroundTask/completed" if item["type"] == "backgroundTask" else "item/delegation/completed"
                )
                where = scope(None)
            else:
                kind, where = "item/completed", item_scope
            events.append(
                {
                    "type": kind,
                    "threadId": thread_id,
                    "providerThreadId": provider_thread_id,
                    "scope": where,
                    "item": settled,
                }
            )
        for turn in work.open_turns:
            done: Event = {"type": "turn/completed", "threadId": thread_id, "providerThreadId": provider_thread_id}
            done["scope"] = scope(turn)
            done["status"] = "failed"
            events.append(done)
        return events
