"""Provider handles numbered by first appearance, so that a cell bbridge recorded replays to its goldens although
the handles its bridge or its agent mints change on every run (README "Testing your bridge in CI").

Which fields: the two keys of the event catalogue (assembler.md §3.2) that hold a provider's handle, at an event's
top level: `providerThreadId` (the provider's session or thread, protocol.md §4.1: the value of a `thread/identity`
event; the unstamped `""` of every other event is left as it is) and `providerCheckpointId` (`turn/completed`: where
a fork or rewind may start, §4.5). Provider turn and item ids never reach an event (the assembler mints bb ids for
them, assembler.md §5). Nothing else is touched: ids inside content (a `rawEvent`, a tool's arguments, a
delegation's `childRef`) are content.

How: each distinct handle, in order of first appearance in one event stream, becomes `da00000000-h1`, `-h2`, ...:
the goldens' minted prefix (`bbridge.replay.cells.GOLDEN_ENTROPY`) with `h` for a handle, as the assembler's own
turn and item ids are pinned (`-t1`, `-i1`: the fixed prefix, numbered in minting order). The same handle is always
the same number, so a handle reused (a checkpoint named after its thread, a thread resumed) still shows as a reuse
and a bridge that hands out a handle where it handed out another still fails; numbering a numbered stream changes
nothing.

Where: in cells bbridge recorded (`bbridge run --record`, `bbridge serve --record`: their `manifest.json` names
`madeBy`, `recording.recorded_by_bbridge`). `bbridge golden` writes their goldens numbered (`golden.bless`);
`bbridge parity bridge` numbers both legs before its diff, so a golden blessed before handles were numbered still
passes, and its `--update` writes the replay numbered (`bridge_parity`); `bbridge parity recordings` numbers both
sides of its offline check (`parity`). The reference's cells (no `madeBy`) keep their handles and are compared byte
for byte as before: their fake provider replays the provider's ids verbatim, and a ported bridge must make the same
handles of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from bbridge.core.events import Event, encode_event
from bbridge.replay.cells import GOLDEN_ENTROPY
from bbridge.replay.recording import recorded_by_bbridge

HANDLES: Final = ("providerThreadId", "providerCheckpointId")


def number_handles(events: list[Event], prefix: str = GOLDEN_ENTROPY) -> list[Event]:
    """The events with each non-empty handle replaced by `<prefix>-h<n>`, `n` its rank of first appearance; an
    event with none is the same object, one with any a shallow copy (its key order kept)."""
    numbers: dict[str, str] = {}
    numbered = []
    for event in events:
        keys = [key for key in HANDLES if isinstance(event.get(key), str) and event[key]]
        if keys:
            event = dict(event)
            for key in keys:
                event[key] = numbers.setdefault(event[key], f"{prefix}-h{len(numbers) + 1}")
        numbered.append(event)
    return numbered


def as_blessed(cell: Path, events: list[Event]) -> list[Event]:
    """A cell's events as its goldens hold them: handles numbered when bbridge recorded it, else as they are."""
    return number_handles(events) if recorded_by_bbridge(cell) else events


def number_lines(lines: list[str]) -> list[str]:
    """Golden lines (one event each) with their handles numbered: a line numbering leaves equal is kept byte for byte
    (every line of a golden blessed numbered), a changed one re-encoded."""
    events = [json.loads(line) for line in lines]
    return [
        line if after == before else encode_event(after).decode()
        for line, before, after in zip(lines, events, number_handles(events), strict=True)
    ]
