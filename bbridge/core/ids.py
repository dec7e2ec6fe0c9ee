"""Central id minting and the provider↔bb id maps (assembler.md §5).

Every turn and item id is minted here from one pair of counters per
assembler (never reset); provider ids are only ever join keys.
"""

from __future__ import annotations

from msgspec import UnsetType

from bbridge.core.items import UNSET
from bbridge.core.state import MAX_MAP, ThreadState, trim


class Ids:
    """The counters and the join maps: `turn`/`item` mint, the rest resolve a provider id (minting when new)."""

    def __init__(self, entropy: str) -> None:
        self.entropy = entropy
        self._turn_n = 0
        self._item_n = 0

    def turn(self) -> str:
        self._turn_n += 1
        return f"{self.entropy}-t{self._turn_n}"

    def item(self) -> str:
        self._item_n += 1
        return f"{self.entropy}-i{self._item_n}"

    def vouch(self, s: ThreadState, ptid: str) -> str:
        bb = s.turn_by_ptid.get(ptid)
        if bb is None:
            bb = self.turn()
            s.turn_by_ptid[ptid] = bb
            s.ptid_by_turn[bb] = ptid
            trim(s.turn_by_ptid, MAX_MAP)
            trim(s.ptid_by_turn, MAX_MAP)
        return bb

    @staticmethod
    def register(s: ThreadState, pid: str, bb: str) -> None:
        s.item_by_pid[pid] = bb
        s.pid_by_item[bb] = pid
        trim(s.item_by_pid, MAX_MAP)
        trim(s.pid_by_item, MAX_MAP)

    def parent(self, s: ThreadState, ref: str | UnsetType) -> str | None:
        if ref is UNSET:
            return None
        bb = s.item_by_pid.get(ref)
        if bb is None:
            bb = self.item()
            self.register(s, ref, bb)
        return bb

    def known_or_mint(self, s: ThreadState, pid: str | UnsetType) -> str:
        bb = None if pid is UNSET else s.item_by_pid.get(pid)
        if bb is None:
            bb = self.item()
        if pid is not UNSET:
            self.register(s, pid, bb)
        return bb
