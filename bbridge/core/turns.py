"""Turn lifecycle: the unkeyed current turn, vouched provider turns, settlement (assembler.md §7).

Also the no-turn fallback (§8.0): every handler that finds no turn ends here; and the session's end, which
interrupts the open turn.
"""

from __future__ import annotations

from typing import Any

from msgspec import UnsetType

from bbridge.core import grammar as g
from bbridge.core import items as it
from bbridge.core.events import Event, new_event, scope
from bbridge.core.ids import Ids
from bbridge.core.items import UNSET
from bbridge.core.sink import Sink
from bbridge.core.state import ThreadState


class Turns:
    """Opens, resolves and settles turns for the assembler's handlers; emits through the shared sink."""

    def __init__(self, provider_id: str, sink: Sink, ids: Ids) -> None:
        self.provider_id = provider_id  # stamped on every provider/unhandled
        self._sink = sink
        self._ids = ids

    def open_turn(self, s: ThreadState) -> str:
        if s.current_turn is not None:
            return s.current_turn
        turn = s.current_turn = self._ids.turn()
        self._sink.push(new_event("turn/started", turn))
        queued, s.pending_accepted = s.pending_accepted, []
        for request_id in queued:
            event = new_event("turn/input/accepted", turn)
            event["clientRequestId"] = request_id
            self._sink.push(event)
        return turn

    @staticmethod
    def finish_turn(s: ThreadState) -> None:
        if s.current_turn is not None:
            s.last_turn = s.current_turn
        s.current_turn = None
        if s.open_items:
            s.keep_attached_items()
        if s.pending_progress:
            s.pending_progress = {k: v for k, v in s.pending_progress.items() if not v[1]}
        s.cmd_snapshots.clear()

    def settle_turn(self, s: ThreadState, turn: str, status: str, boundary: g.TurnBoundary | None = None) -> None:
        event = new_event("turn/completed", turn)
        event["status"] = status
        if boundary is not None:
            if boundary.error is not UNSET:
                event["error"] = boundary.error
            if boundary.providerCheckpointId is not UNSET:
                event["providerCheckpointId"] = boundary.providerCheckpointId
        self._sink.push(event)

    def turn_for(self, s: ThreadState, ptid: str | UnsetType) -> str | None:
        """The common resolution: vouched provider turn, else the open unkeyed turn."""
        return s.current_turn if ptid is UNSET else self._ids.vouch(s, ptid)

    def turn_or_last(self, s: ThreadState, ptid: str | UnsetType) -> str | None:
        if ptid is not UNSET:
            return self._ids.vouch(s, ptid)
        return s.current_turn if s.current_turn is not None else s.last_turn

    def claiming_turn(self, s: ThreadState) -> str | None:
        """The open turn, or one opened for pending accepted input (lifecycle settlement)."""
        if s.current_turn is None and s.pending_accepted:
            return self.open_turn(s)
        return s.current_turn

    def fallback(self, s: ThreadState, fallback: g.NoTurnFallback | UnsetType, parent_ref: Any) -> None:
        if fallback is UNSET:
            return
        parent = self._ids.parent(s, parent_ref)
        self.push_unhandled(fallback.rawType, fallback.raw, None, parent)

    def push_unhandled(self, raw_type: str, raw: g.RawEvent, turn: str | None, parent: str | None) -> None:
        event: Event = {
            "type": "provider/unhandled", "threadId": "", "providerThreadId": "",
            "providerId": self.provider_id, "rawType": raw_type, "rawEvent": raw, "scope": scope(turn),
        }  # fmt: skip
        if parent:
            event["parentToolCallId"] = parent
        self._sink.push(event)

    def input_accepted(self, s: ThreadState, d: g.InputAccepted) -> None:
        if d.providerTurnId is not UNSET:
            turn: str | None = self._ids.vouch(s, d.providerTurnId)
        else:
            turn = s.current_turn
            if turn is None:
                s.pending_accepted.append(d.clientRequestId)
                return
        event = new_event("turn/input/accepted", turn)
        event["clientRequestId"] = d.clientRequestId
        self._sink.push(event)

    def turn_open(self, s: ThreadState, d: g.TurnOpen) -> None:
        if d.providerTurnId is UNSET:
            self.open_turn(s)
            return
        parent = self._ids.parent(s, d.parentRef)
        event = new_event("turn/started", self._ids.vouch(s, d.providerTurnId))
        if parent:
            event["parentToolCallId"] = parent
        self._sink.push(event)

    def turn_boundary(self, s: ThreadState, d: g.TurnBoundary) -> None:
        if d.providerTurnId is not UNSET:
            self.settle_turn(s, self._ids.vouch(s, d.providerTurnId), d.status, d)
            return
        turn = s.current_turn
        if turn is None and d.claimIfIdle is True and s.pending_accepted:
            turn = self.open_turn(s)
        if turn is None:
            return
        self.settle_turn(s, turn, d.status, d)
        self.finish_turn(s)

    def session_ended(self, s: ThreadState, d: g.SessionEnded) -> None:
        """The provider's session ended: the claiming turn's open items complete (their text so far, else
        interrupted), except those attached to the thread, and the turn settles as interrupted."""
        turn = self.claiming_turn(s)
        if turn is None:
            return
        for rec in list(s.open_items.values()):
            if rec.thread_attached:
                continue
            item = None
            if rec.text or rec.summary_text:
                item = it.text_item(rec.item, rec.text, rec.summary_text)
            if item is None:
                item = it.echo_item(rec.item, "interrupted", None, None)
            event = new_event("item/completed", turn)
            event["item"] = item
            self._sink.push(event)
        self.settle_turn(s, turn, "interrupted")
        self.finish_turn(s)
