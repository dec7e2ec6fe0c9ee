"""Sub-agent delegation (spec §3.10): which call a sub-agent thread or turn belongs to, and parent refs.

The translator's state for delegations: a `subAgentActivity` item starts a `SubAgent`, shown as a delegation
item of its parent turn; `Links` finds the delegating call of a sub-agent's thread or turn so its deltas carry
that call as their `parentRef` (`attach`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from msgspec import UNSET

from bbridge.core import grammar as g

KEYED = (g.ItemOpen, g.ItemClose, g.ItemProgress, g.ItemTextDelta, g.ItemOutputDelta)


@dataclass(slots=True)
class SubAgent:
    """A sub-agent started by a `subAgentActivity` item, shown as a delegation item of its parent turn."""

    call: str
    agent_thread: str
    agent_path: str
    parent_thread: str
    parent_turn: str
    parent_ref: str | None = None
    follow_ups: int = 0
    terminal: bool = False

    @property
    def open(self) -> bool:
        return not self.terminal or self.follow_ups > 0

    def shape(self) -> g.DelegationShape:
        return g.DelegationShape(childRef=self.agent_thread, label=self.agent_path, background=False)

    def key(self) -> g.ItemKey:
        key = g.ItemKey(providerItemId=self.call)
        if self.parent_ref is not None:
            key.parentRef = self.parent_ref
        return key


@dataclass(slots=True)
class Links:
    """Delegation links (§3.10): which call a sub-agent thread or turn belongs to."""

    agent_calls: dict[str, str] = field(default_factory=dict)
    turn_calls: dict[str, str] = field(default_factory=dict)
    pending: dict[str, deque[tuple[str, str]]] = field(default_factory=dict)
    queued: set[str] = field(default_factory=set)
    agents: dict[str, SubAgent] = field(default_factory=dict)
    interactions: set[str] = field(default_factory=set)

    def queue(self, thread: str, call: str, turn: str) -> None:
        if call in self.queued:
            return
        self.queued.add(call)
        self.pending.setdefault(thread, deque()).append((call, turn))

    def unqueue(self, call: str) -> None:
        if call not in self.queued:
            return
        self.queued.discard(call)
        for thread, links in list(self.pending.items()):
            kept = deque(link for link in links if link[0] != call)
            if kept:
                self.pending[thread] = kept
            else:
                del self.pending[thread]

    def pop_for(self, thread: str, turn: str) -> str | None:
        links = self.pending.get(thread)
        while links:
            call, parent_turn = links.popleft()
            self.queued.discard(call)
            if parent_turn != turn:
                if not links:
                    del self.pending[thread]
                return call
        self.pending.pop(thread, None)
        return None


def parent_of(delta: g.Delta) -> str | None:
    """The delta's `parentRef` (an item's is in its key), None when it has none."""
    ref = delta.key.parentRef if isinstance(delta, KEYED) else getattr(delta, "parentRef", UNSET)
    return ref if isinstance(ref, str) else None


def attach(delta: g.Delta, parent: str) -> None:
    """Make `parent` the delta's `parentRef` unless it already names one."""
    if isinstance(delta, KEYED):
        if delta.key.parentRef is UNSET:
            delta.key.parentRef = parent
    elif isinstance(delta, g.TurnOpen | g.Unhandled) and delta.parentRef is UNSET:
        delta.parentRef = parent
