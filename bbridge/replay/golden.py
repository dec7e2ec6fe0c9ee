"""Blessing recorded cells (`bbridge golden`): a cell's expected events and pinned counts, written by bbridge's own
assembler in the layout and bytes of the reference's goldens (`../shared/golden/README.md`).

Per cell, `GOLDEN_ROOT/<provider>/<cell>/`: `raw-events.ndjson` (coalescing off, fixed clock, unstamped, minted
id prefix `da00000000`), `raw-events.coalesced.ndjson` (100 ms coalescing, the clock at each line its recorded
`ts`), `grammar-drops.json` (`[{index, rule, reason, eventType}]`, 2-space JSON); and one line per cell in
`GOLDEN_ROOT/row-counts.json`, keyed `<provider>/<cell>`: `{events, unhandled, grammarDrops}` (the reference's
`rows` counts its server's projection, which bbridge does not port, so it is not written). A cell bbridge recorded
has its provider handles numbered in both event files (`bbridge.replay.handles`); the reference's keep theirs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bbridge.core.events import Event, encode_lines
from bbridge.replay.cells import Drop, Replay, replay_cell
from bbridge.replay.handles import as_blessed

RAW = "raw-events.ndjson"
COALESCED = "raw-events.coalesced.ndjson"
DROPS = "grammar-drops.json"
COUNTS = "row-counts.json"


def cell_name(cell: Path) -> str:
    """`<provider>/<cell>`: the cell's folder and its parent's (the provider id the assembler is given)."""
    resolved = cell.resolve()
    return f"{resolved.parent.name}/{resolved.name}"


def drops_json(drops: Iterable[Drop]) -> list[dict[str, Any]]:
    return [{"index": d.index, "rule": d.rule, "reason": d.reason, "eventType": d.event_type} for d in drops]


def counts_of(events: list[Event], drops: list[Drop]) -> dict[str, int]:
    """The pins: accepted events, `provider/unhandled` among them, grammar drops."""
    dropped = {d.index for d in drops}
    accepted = [e for i, e in enumerate(events) if i not in dropped]
    unhandled = sum(1 for e in accepted if e["type"] == "provider/unhandled")
    return {"events": len(accepted), "unhandled": unhandled, "grammarDrops": len(drops)}


def write_events(folder: Path, events: list[Event], drops: list[Drop], coalesced: list[Event] | None) -> None:
    """The golden files of one cell (the coalesced file only when given)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RAW).write_bytes(encode_lines(events))
    if coalesced is not None:
        (folder / COALESCED).write_bytes(encode_lines(coalesced))
    (folder / DROPS).write_text(json.dumps(drops_json(drops), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_counts(golden_root: Path, counts: Mapping[str, dict[str, int]]) -> Path:
    """Merge `counts` into `GOLDEN_ROOT/row-counts.json` (sorted keys, 2-space JSON, a final newline)."""
    path = golden_root / COUNTS
    pinned: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    pinned.update(counts)
    golden_root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(pinned.items())), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


@dataclass
class Blessed:
    name: str
    folder: Path
    counts: dict[str, int]
    rejected: list[str]  # invalid thread/delta notifications skipped whole


def bless(cells: Iterable[Path], golden_root: Path) -> list[Blessed]:
    """Every cell's goldens written from its own `bridge→runtime` lane (`.current` preferred), and its pins."""
    blessed = []
    for cell in cells:
        name = cell_name(cell)
        provider = name.split("/", 1)[0]
        raw: Replay = replay_cell(cell, provider)
        coalesced = replay_cell(cell, provider, flush_ms=100, clock="recorded")
        folder = golden_root / name
        write_events(folder, as_blessed(cell, raw.events), raw.drops, as_blessed(cell, coalesced.events))
        blessed.append(Blessed(name, folder, counts_of(raw.events, raw.drops), raw.rejected))
    if blessed:
        write_counts(golden_root, {b.name: b.counts for b in blessed})
    return blessed
