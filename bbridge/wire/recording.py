"""Reading recorded bridge traffic (protocol.md §5, §6.1).

A cell is a folder of lane files `<direction>.ndjson`, each line an entry
`{ts, run, seq, dir, line}`; merged by `(run, seq)` they give wire order. A
`bridge→runtime.current.ndjson` lane (re-recorded for grammar v3) replaces the
`bridge→runtime` lane when present.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from bbridge.core.nesting import MAX_JSON_DEPTH, too_deep

RUNTIME_TO_BRIDGE = "runtime→bridge"
BRIDGE_TO_RUNTIME = "bridge→runtime"
PROVIDER_TO_BRIDGE = "provider→bridge"
BRIDGE_TO_PROVIDER = "bridge→provider"
DIRECTIONS = (RUNTIME_TO_BRIDGE, BRIDGE_TO_RUNTIME, PROVIDER_TO_BRIDGE, BRIDGE_TO_PROVIDER)
CURRENT_SUFFIX = ".current"


class Entry(msgspec.Struct, gc=False):
    seq: int | float
    dir: str
    line: str
    ts: int | float = 0
    run: int | float = 0


class RecordingError(ValueError):
    """A lane file that does not hold valid entries; the message names file and line."""


_entry_decoder = msgspec.json.Decoder(Entry)


def read_lane(path: Path, direction: str) -> list[Entry]:
    entries: list[Entry] = []
    for number, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            if too_deep(raw):
                raise RecordingError(f"{path}:{number}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
            entry = _entry_decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise RecordingError(f"{path}:{number}: {exc}") from None
        if too_deep(entry.line.encode()):  # the recorded line is decoded again by whoever replays it
            raise RecordingError(f"{path}:{number}: the recorded line nests deeper than {MAX_JSON_DEPTH} levels")
        if entry.dir != direction:
            raise RecordingError(f"{path}:{number}: dir {entry.dir!r} does not match lane {direction!r}")
        entries.append(entry)
    return entries


def lane_path(cell: Path, direction: str, current: bool = False) -> Path:
    return cell / f"{direction}{CURRENT_SUFFIX if current else ''}.ndjson"


def bridge_lane(cell: Path) -> list[Entry]:
    """The `bridge→runtime` lane in file order, `.current` preferred."""
    current = lane_path(cell, BRIDGE_TO_RUNTIME, current=True)
    if current.exists():
        return read_lane(current, BRIDGE_TO_RUNTIME)
    plain = lane_path(cell, BRIDGE_TO_RUNTIME)
    return read_lane(plain, BRIDGE_TO_RUNTIME) if plain.exists() else []


def read_cell(cell: Path) -> list[Entry]:
    """All four lanes merged into wire order (stable sort on `(run, seq)`)."""
    entries: list[Entry] = []
    for direction in DIRECTIONS:
        if direction == BRIDGE_TO_RUNTIME:
            entries.extend(bridge_lane(cell))
            continue
        path = lane_path(cell, direction)
        if path.exists():
            entries.extend(read_lane(path, direction))
    entries.sort(key=lambda e: (e.run, e.seq))
    return entries


def is_cell(path: Path) -> bool:
    return path.is_dir() and lane_path(path, BRIDGE_TO_RUNTIME).exists()


def find_cells(root: Path) -> list[Path]:
    """Every folder under `root` that holds a `bridge→runtime` lane, sorted."""
    return sorted(p.parent for p in root.rglob(f"{BRIDGE_TO_RUNTIME}.ndjson") if is_cell(p.parent))
