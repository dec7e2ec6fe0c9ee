"""An item's output stream: command and file-change output deltas, and command output snapshots.

A delta is relayed as it comes (`item.outputDelta`); a snapshot (`command.outputSnapshot`) is the command's whole
output so far, turned into the part not yet sent (or a reset) against the last snapshot of the same item. Neither
opens an item: output for no open item is relayed under a minted or known id (a delta) or dropped (a snapshot).
"""

from __future__ import annotations

from typing import Final

from bbridge.core import grammar as g
from bbridge.core.events import delta_event
from bbridge.core.ids import Ids
from bbridge.core.sink import Sink
from bbridge.core.state import ThreadState, diff_cumulative_text, item_key
from bbridge.core.turns import Turns

_OUTPUT_DELTA_TYPE: Final = {
    "command": "item/commandExecution/outputDelta",
    "fileChange": "item/fileChange/outputDelta",
}


class Outputs:
    """The assembler's handlers for an item's output; emits through the shared sink."""

    def __init__(self, sink: Sink, ids: Ids, turns: Turns) -> None:
        self._sink = sink
        self._ids = ids
        self._turns = turns

    def output_delta(self, s: ThreadState, d: g.ItemOutputDelta) -> None:
        key = d.key
        turn = self._turns.turn_for(s, d.providerTurnId)
        if turn is None:
            self._turns.fallback(s, d.noTurnFallback, key.parentRef)
            return
        rec = s.open_items.get(item_key(key))
        bb = rec.bb_id if rec is not None else self._ids.known_or_mint(s, key.providerItemId)
        parent = self._ids.parent(s, key.parentRef)
        event = delta_event(_OUTPUT_DELTA_TYPE[d.channel], turn, bb, d.text)
        if parent:
            event["parentToolCallId"] = parent
        self._sink.push(event)

    def output_snapshot(self, s: ThreadState, d: g.CommandOutputSnapshot) -> None:
        key = d.key
        turn = s.current_turn
        if turn is None:
            self._turns.fallback(s, d.noTurnFallback, key.parentRef)
            return
        k = item_key(key)
        rec = s.open_items.get(k)
        if rec is None:
            return
        step = diff_cumulative_text(d.text, s.cmd_snapshots.get(k))
        if step is None:
            return
        delta, s.cmd_snapshots[k], reset = step
        parent = self._ids.parent(s, key.parentRef)
        event = delta_event("item/commandExecution/outputDelta", turn, rec.bb_id, delta)
        if reset:
            event["reset"] = True
        if parent:
            event["parentToolCallId"] = parent
        self._sink.push(event)
