"""The provider's reports on a thread: usage, context, metadata, errors, warnings, unhandled events (assembler.md §11.1–§11.10).

None opens or closes an item, and only a settling `provider.error` ends a turn: each resolves its turn through
`Turns` and pushes one event through the shared sink. Item deltas stay in the assembler (the hot path).
"""

from __future__ import annotations

from bbridge.core import grammar as g
from bbridge.core.events import new_event
from bbridge.core.ids import Ids
from bbridge.core.items import UNSET
from bbridge.core.sink import Sink
from bbridge.core.state import ThreadState
from bbridge.core.turns import Turns


class Reports:
    """The assembler's handlers for the deltas that report on a thread; emits through the shared sink."""

    def __init__(self, sink: Sink, ids: Ids, turns: Turns) -> None:
        self._sink = sink
        self._ids = ids
        self._turns = turns

    # -- usage, context, metadata --------------------------------------------

    def usage(self, s: ThreadState, d: g.Usage) -> None:
        turn = self._turns.turn_or_last(s, d.providerTurnId)
        if turn is None:
            return
        event = new_event("thread/tokenUsage/updated", turn)
        event["tokenUsage"] = {"total": d.total, "last": d.last, "modelContextWindow": d.modelContextWindow}
        self._sink.push(event)

    def context_window(self, s: ThreadState, d: g.ContextWindow) -> None:
        if d.providerTurnId is not UNSET or d.attach != "open":
            turn = self._turns.turn_or_last(s, d.providerTurnId)
        else:
            turn = s.current_turn
        event = new_event("thread/contextWindowUsage/updated", turn)
        size = None if d.size is UNSET else d.size
        event["contextWindowUsage"] = {"usedTokens": d.used, "modelContextWindow": size, "estimated": d.estimated}
        self._sink.push(event)

    def context_compacted(self, s: ThreadState, d: g.ContextCompacted) -> None:
        turn = self._turns.turn_or_last(s, d.providerTurnId)
        if turn is None:
            self._turns.fallback(s, d.noTurnFallback, UNSET)
            return
        self._sink.push(new_event("thread/compacted", turn))

    def context_cleared(self, s: ThreadState, d: g.ContextCleared) -> None:
        turn = self._turns.turn_or_last(s, UNSET)
        if turn is not None:
            self._sink.push(new_event("thread/context/cleared", turn))

    def turn_diff(self, s: ThreadState, d: g.TurnDiff) -> None:
        turn = self._turns.turn_for(s, d.providerTurnId)
        if turn is not None:
            event = new_event("turn/diff/updated", turn)
            event["diff"] = d.diff
            self._sink.push(event)

    def thread_started(self, s: ThreadState, d: g.ThreadStarted) -> None:
        self._sink.push({"type": "thread/started", "threadId": "", "scope": {"kind": "thread"}})

    def thread_identity(self, s: ThreadState, d: g.ThreadIdentity) -> None:
        self._sink.push(
            {
                "type": "thread/identity",
                "threadId": "",
                "providerThreadId": d.providerThreadId,
                "scope": {"kind": "thread"},
            }
        )

    def thread_name(self, s: ThreadState, d: g.ThreadName) -> None:
        event = new_event("thread/name/updated", None)
        event["threadName"] = d.name
        self._sink.push(event)

    def extension_state(self, s: ThreadState, d: g.ExtensionState) -> None:
        event = new_event("thread/extensionState/updated", None)
        event["kind"] = d.extensionKind
        event["payload"] = d.payload
        self._sink.push(event)

    def rate_limits(self, s: ThreadState, d: g.ProviderRateLimits) -> None:
        event = new_event("provider/rateLimits/updated", None)
        event["rateLimits"] = d.rateLimits
        self._sink.push(event)

    # -- errors, warnings, diagnostics ---------------------------------------

    def provider_error(self, s: ThreadState, d: g.ProviderError) -> None:
        if d.providerTurnId is not UNSET:
            turn: str | None = self._ids.vouch(s, d.providerTurnId)
        elif d.threadScoped is True:
            turn = None
        else:
            turn = self._turns.claiming_turn(s)
        event = new_event("provider/error", turn)
        event["message"] = d.message
        if d.detail is not UNSET:
            event["detail"] = d.detail
        if d.willRetry is not UNSET:
            event["willRetry"] = d.willRetry
        if d.errorInfo is not UNSET:
            event["errorInfo"] = d.errorInfo
        self._sink.push(event)
        if d.settlesTurn is True and turn is not None:
            self._turns.settle_turn(s, turn, "failed")
            self._turns.finish_turn(s)

    def model_fallback(self, s: ThreadState, d: g.ProviderModelFallback) -> None:
        event = new_event("provider/modelFallback", self._turns.turn_or_last(s, UNSET))
        event["originalModel"] = d.originalModel
        event["fallbackModel"] = d.fallbackModel
        event["reason"] = d.reason
        event["message"] = d.message
        self._sink.push(event)

    def warning(self, s: ThreadState, d: g.ProviderWarning) -> None:
        event = new_event("provider/warning", s.current_turn if d.vouchedTurn is True else None)
        event["category"] = "general" if d.category is UNSET else d.category
        if d.summary is not UNSET:
            event["summary"] = d.summary
        if d.details is not UNSET:
            event["details"] = d.details
        self._sink.push(event)

    def unhandled(self, s: ThreadState, d: g.Unhandled) -> None:
        if d.onlyIfNoTurn is True and s.current_turn is not None:
            return
        if d.providerTurnId is not UNSET:
            turn: str | None = self._ids.vouch(s, d.providerTurnId)
        else:
            turn = s.current_turn if d.vouchedTurn is True else None
        self._turns.push_unhandled(d.rawType, d.raw, turn, self._ids.parent(s, d.parentRef))
