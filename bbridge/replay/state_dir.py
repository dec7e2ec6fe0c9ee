"""The state directory the replay harness shares with its fake provider children (protocol.md §6.4).

Each child claims the next unclaimed segment of its cell (`segment-N` directories, created atomically), and
paces its spontaneous lines by `cursor` (`"<run> <seq>"`: play lines strictly before that position; `end` or
absent: play all), which the driver moves as it replays the runtime lane.
"""

from __future__ import annotations

from pathlib import Path

from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, PROVIDER_TO_BRIDGE, LaneEntry, lane_path, read_lane


def provider_entries(cell: Path) -> list[LaneEntry]:
    """A cell's two provider lanes merged in wire order (what a fake provider child plays and expects)."""
    entries = [
        entry
        for direction in (PROVIDER_TO_BRIDGE, BRIDGE_TO_PROVIDER)
        if (path := lane_path(cell, direction)).exists()
        for entry in read_lane(path, direction)
    ]
    entries.sort(key=lambda e: (e.run, e.seq))
    return entries


def claim_segment(state: Path) -> int:
    state.mkdir(parents=True, exist_ok=True)
    for index in range(10_000):
        try:
            (state / f"segment-{index}").mkdir()
        except FileExistsError:
            continue
        return index
    raise RuntimeError("too many replay children")


def read_cursor(state: Path) -> tuple[float, float] | None:
    try:
        text = (state / "cursor").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if text in ("", "end"):
        return None
    run, seq = text.split()
    return float(run), float(seq)
