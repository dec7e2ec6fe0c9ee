"""A bridge's mistakes in the bridge author's words: the item key the bridge sent, not the id bb minted for it.

The grammar guard's reasons (assembler.md §13) name bb's item ids and stay byte-identical to the reference's;
the assembler notes the closes the grammar lets pass (`Suspect`: a second close of one item, a close of an item
that is not open) without an event. Both are worded here with the bridge's own key and what to fix, for the
daemon's log, `daemon/status` (each thread's `bridgeMistakes`, which `bbridge run --strict` reads) and the
conformance report.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

import msgspec

from bbridge.core import grammar as g
from bbridge.core.assembler import CLOSES_ONCE, Assembler, Suspect
from bbridge.core.guard import Guard, Violation

MAX_PER_THREAD: Final = 20
MAX_THREADS: Final = 256


def key_text(key: g.ItemKey) -> str:
    """The key as the bridge sent it, e.g. `{"providerItemId":"msg-1"}`."""
    return msgspec.json.encode(key).decode()


def drop_hint(assembler: Assembler, guard: Guard, thread_id: str, event: dict[str, Any], rule: str) -> str:
    """What to add to a guard drop's reason: the bridge's key of the item (when it had one) and, for a delta that
    reached an item that already completed, that the key was reused. Empty when bb minted the id unasked.

    `thread_id` is the notification's (the assembler's state); the guard's is the event's own stamp."""
    item = event.get("item")
    item_id = item.get("id") if isinstance(item, dict) else event.get("itemId")
    if not isinstance(item_id, str):
        return ""
    provider_item_id = assembler.get_provider_item_id(thread_id, item_id)
    if provider_item_id is None:
        return ""
    hint = f" The bridge's item key: {key_text(g.ItemKey(providerItemId=provider_item_id))}."
    if rule == "item/opens-before-delta" and guard.settled(event["threadId"], item_id):
        hint += (
            " That key's item already completed in this thread, so this delta reaches the finished item:"
            " the key is reused. Give each new item a fresh key (e.g. a counter: msg-1, msg-2, …)."
        )
    return hint


def drop_message(provider_id: str, thread_id: str, event: dict[str, Any], violation: Violation, hint: str) -> str:
    """The runtime's drop log line (protocol.md §7.5), then the hint."""
    return (
        f"Dropping {event['type']} from provider {provider_id!r} in thread {thread_id!r} "
        f"({violation.rule}): {violation.reason}.{hint}"
    )


def suspect_message(suspect: Suspect) -> str:
    """One suspect close, with the fix."""
    delta = suspect.delta
    kind = "item.close" if isinstance(delta, g.ItemClose) else "item.textClose"
    key = key_text(delta.key)
    if suspect.rule == CLOSES_ONCE:
        return f"{kind} for item key {key}, which already closed: the second close is ignored. Close each item once."
    return (
        f"{kind} for item key {key}, which is not open (never opened, or already settled by the turn's end): "
        "the item it was meant to close, if any, stays open. Open an item (item.open, or its first delta) under "
        "the key its close uses, and check the key for a typo."
    )


class Mistakes:
    """The last `MAX_PER_THREAD` mistakes of each of the last `MAX_THREADS` threads, for `daemon/status`."""

    def __init__(self) -> None:
        self._threads: dict[str, deque[dict[str, str]]] = {}

    def note(self, thread_id: str, rule: str, message: str) -> None:
        found = self._threads.pop(thread_id, None)  # re-inserted: the most recently noted thread is kept longest
        entries = found if found is not None else deque(maxlen=MAX_PER_THREAD)
        entries.append({"rule": rule, "message": message})
        self._threads[thread_id] = entries
        while len(self._threads) > MAX_THREADS:
            del self._threads[next(iter(self._threads))]

    def of_thread(self, thread_id: str) -> list[dict[str, str]]:
        return list(self._threads.get(thread_id, ()))
