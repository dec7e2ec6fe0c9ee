"""Central id minting and the provider↔bb id maps (assembler.md §5).

Every turn and item id is minted here from one pair of counters per
assembler (never reset); provider ids are only ever join keys.
"""

from __future__ import annotations

from msgspec import UNSET, UnsetType

from bbridge.sink import Sink
from bbridge.state import MAX_MAP, ThreadState, trim


class Ids(Sink):
    def __init__(self, entropy: str, progress_throttle_ms: float, text_delta_flush_ms: float) -> None:
        super().__init__(progress_throttle_ms, text_delta_flush_ms)
        self.entropy = entropy
        self._turn_n = 0
        self._item_n = 0

    def _mint_turn(self) -> str:
        self._turn_n += 1
        return f"{self.entropy}-t{self._turn_n}"

    def _mint_item(self) -> str:
        self._item_n += 1
        return f"{self.entropy}-i{self._item_n}"

    def _vouch(self, s: ThreadState, ptid: str) -> str:
        bb = s.turn_by_ptid.get(ptid)
        if bb is None:
            bb = self._mint_turn()
            s.turn_by_ptid[ptid] = bb
            s.ptid_by_turn[bb] = ptid
            trim(s.turn_by_ptid, MAX_MAP)
            trim(s.ptid_by_turn, MAX_MAP)
        return bb

    @staticmethod
    def _register(s: ThreadState, pid: str, bb: str) -> None:
        s.item_by_pid[pid] = bb
        s.pid_by_item[bb] = pid
        trim(s.item_by_pid, MAX_MAP)
        trim(s.pid_by_item, MAX_MAP)

    def _parent(self, s: ThreadState, ref: str | UnsetType) -> str | None:
        if ref is UNSET:
            return None
        bb = s.item_by_pid.get(ref)
        if bb is None:
            bb = self._mint_item()
            self._register(s, ref, bb)
        return bb

    def _known_or_mint(self, s: ThreadState, pid: str | UnsetType) -> str:
        bb = None if pid is UNSET else s.item_by_pid.get(pid)
        if bb is None:
            bb = self._mint_item()
        if pid is not UNSET:
            self._register(s, pid, bb)
        return bb
