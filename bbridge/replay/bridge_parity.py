"""Replay recorded cells through a live bridge and diff what it emits against the goldens (protocol.md §6).

Each cell runs through the shared §6.3 driver (`bbridge.replay.driver`):
the bridge under test is spawned, pointed by its provider's replay profile
(§6.2: ACP launch specs rewritten, the codex app-server and the Claude Code CLI
named in its environment) at the fake provider child of
`bbridge.replay.fake_agent`, which plays the cell's provider lanes; the cell's
`runtime→bridge` requests drive it (machine facts rewritten: `cwd` → a scratch
workspace, `envVars.PATH` → this machine's), bridge requests are answered with the
runtime's recorded answers, and every `thread/delta` is assembled as the
goldens were (`GOLDEN_LANE`: `Assembler(provider, "da00000000", 500, 0)`, fixed
clock, unstamped). The events are compared line for line with
`GOLDEN_ROOT/<provider>/<cell>/raw-events.ndjson`; for a cell bbridge recorded, with the provider handles of both
legs numbered by first appearance (`bbridge.replay.handles`), since its bridge or provider mints new ones each run.

Allowlist (`[{provider, cell, layer: "events", where?, path, reason}]`):
`provider`/`cell` name one or `"*"`; `where` selects events whose fields equal
it (all events when absent); `path` is a JSON pointer inside each selected
event (`*` any key or index, `**` any depth) whose target is deleted (array
elements become null), or `""` to drop the event. Masks apply to both legs. An
entry naming a cell that masks nothing there fails that cell as stale; a
wildcard entry that masks nothing in any cell it matched is reported stale.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from bbridge.config_file import ConfigError
from bbridge.core.events import Event, encode_event
from bbridge.replay.bridge_client import GOLDEN_LANE
from bbridge.replay.cells import Drop
from bbridge.replay.driver import Pacing, Replay, replay_cell
from bbridge.replay.golden import RAW, counts_of, write_counts, write_events
from bbridge.replay.handles import number_handles, number_lines
from bbridge.replay.parity import Check
from bbridge.replay.recording import recorded_by_bbridge
from bbridge.wire.lanes import PROCESS_SCOPE

DEFAULT_PACING = Pacing()
DEFAULT_ALLOWLIST = Path(__file__).resolve().parents[2] / "conformance" / "acp-parity-allowlist.json"


@dataclass
class Run:
    """What one cell's replay leg holds for the diff: every assembled event, grammar drops included."""

    events: list[Event] = field(default_factory=list)
    drops: int = 0
    stalls: list[str] = field(default_factory=list)
    stderr: str = ""
    control: list[Any] = field(default_factory=list)  # every other message the bridge wrote, in order
    dropped: list[Drop] = field(default_factory=list)  # the grammar drops, as `grammar-drops.json` lists them

    @classmethod
    def of(cls, replay: Replay) -> Run:
        events = [e for e in replay.log if e.kind == "event"]
        invalid = [f"invalid thread/delta: {e.reason}" for e in replay.log if e.kind == "invalid-delta"]
        dropped = [
            Drop(index, e.violation.rule, e.violation.reason, e.event["type"])
            for index, e in enumerate(events)
            if e.violation is not None
        ]
        control = [
            e.message
            for e in replay.log
            if e.kind in ("response", "request", "notification") and e.message.get("method") != "thread/delta"
        ]
        return cls([e.event for e in events], len(dropped), replay.stalls + invalid, replay.stderr, control, dropped)


# -- the allowlist -------------------------------------------------------------


@dataclass
class AllowEntry:
    index: int
    provider: str
    cell: str
    path: str
    reason: str
    where: dict[str, Any] = field(default_factory=dict)
    masked: int = 0
    matched: int = 0

    def applies(self, provider: str, cell: str) -> bool:
        return self.provider in ("*", provider) and self.cell in ("*", cell)

    def describe(self) -> str:
        return f"allowlist entry #{self.index} ({self.provider}/{self.cell} {json.dumps(self.where)} {self.path!r})"


def read_allowlist(path: Path | None) -> list[AllowEntry]:
    if path is None or not path.exists():
        return []
    entries = []
    try:
        raw_entries = json.loads(path.read_text(encoding="utf-8"))
        for index, raw in enumerate(raw_entries):
            if raw.get("layer", "events") != "events" or not str(raw.get("reason", "")).strip():
                raise ConfigError(f"{path}: entry {index} needs layer 'events' and a reason")
            entry = AllowEntry(index, raw["provider"], raw["cell"], raw["path"], raw["reason"], raw.get("where", {}))
            entries.append(entry)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: not an allowlist ({exc})") from None
    return entries


def _mask_at(value: Any, segments: list[str]) -> int:
    """Delete (objects) or null (arrays) what `segments` points at; the number of targets removed."""
    if not segments:
        return 0
    head, rest = segments[0], segments[1:]
    if head == "**":
        return _mask_at(value, rest) + sum(_mask_at(child, segments) for child in _children(value))
    keys = list(value) if isinstance(value, dict) else range(len(value)) if isinstance(value, list) else []
    hits = 0
    for key in keys:
        if head != "*" and str(key) != head:
            continue
        if rest:
            hits += _mask_at(value[key], rest)
        elif isinstance(value, dict):
            del value[key]
            hits += 1
        elif value[key] is not None:
            value[key] = None
            hits += 1
    return hits


def _children(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, list) else []


def mask(events: list[Event], entry: AllowEntry) -> tuple[list[Event], int]:
    """The events with the entry's mask applied, and how many targets it removed."""
    segments = [s for s in entry.path.split("/") if s]
    kept: list[Event] = []
    hits = 0
    for event in events:
        if all(event.get(k) == v for k, v in entry.where.items()):
            if not segments:
                hits += 1
                continue
            hits += _mask_at(event, segments)
        kept.append(event)
    return kept, hits


# -- comparison ----------------------------------------------------------------


def compare(name: str, golden: list[str], live: Run, entries: list[AllowEntry], *, numbered: bool = False) -> Check:
    """PASS when the masked legs are equal, no exact-cell entry is stale, and nothing stalled.

    Unmasked golden lines are compared as they are on disk: byte for byte. `numbered`: both legs with their provider
    handles numbered first (a cell bbridge recorded); a golden line that numbering leaves equal is still compared as
    it is on disk.
    """
    provider, cell = name.split("/", 1)
    golden = number_lines(golden) if numbered else golden
    want: list[Event] = [json.loads(line) for line in golden]
    got = number_handles(live.events) if numbered else live.events
    masked_golden = False
    named: list[str] = []
    stale: list[str] = []
    for entry in entries:
        if not entry.applies(provider, cell):
            continue
        entry.matched += 1
        want, hits_want = mask(want, entry)
        got, hits_got = mask(got, entry)
        entry.masked += hits_want + hits_got
        masked_golden = masked_golden or bool(hits_want)
        if hits_want or hits_got:
            named.append(f"#{entry.index} ({hits_want} golden, {hits_got} replayed)")
        elif entry.cell != "*":
            stale.append(f"  stale {entry.describe()}: masks nothing")
    expected = [encode_event(e).decode() for e in want] if masked_golden else golden
    actual = [encode_event(e).decode() for e in got]
    detail = [f"  stall: {s}" for s in live.stalls] + stale
    diff = ""
    if expected != actual:
        detail.append(_difference(expected, actual))
        diff = unified_diff(expected, actual, name)
    summary = f"{name}: {len(live.events)} events, golden {len(golden)}, grammar drops {live.drops}"
    if named:
        summary += f"; allowlisted: {', '.join(named)}"
    return Check(summary, not detail, "\n".join(detail), diff=diff, case=name)


DIFF_LINES = 400  # a unified diff longer than this is cut (the first lines say where the streams part)


def unified_diff(expected: list[str], actual: list[str], name: str) -> str:
    """The golden and replayed event streams as a unified diff (one event a line), at most `DIFF_LINES` lines."""
    lines = list(
        difflib.unified_diff(expected, actual, f"golden/{name}/raw-events.ndjson", f"replay/{name}", n=2, lineterm="")
    )
    if len(lines) > DIFF_LINES:
        lines = [*lines[:DIFF_LINES], f"... {len(lines) - DIFF_LINES} more diff lines"]
    return "\n".join(lines)


def _difference(expected: list[str], actual: list[str]) -> str:
    matcher = difflib.SequenceMatcher(None, expected, actual, autojunk=False)
    only_golden = sum(i2 - i1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag in ("delete", "replace"))
    only_live = sum(j2 - j1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("insert", "replace"))
    index = next(
        (i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b), min(len(expected), len(actual))
    )
    want = expected[index] if index < len(expected) else "<end of golden>"
    have = actual[index] if index < len(actual) else "<end of replay>"
    return f"  {only_golden} only in golden, {only_live} only in replay; first at line {index + 1}:\n    golden: {want}\n    replay: {have}"


def check_cells(
    command: list[str],
    cells: list[Path],
    golden_root: Path,
    allowlist: Path | None = DEFAULT_ALLOWLIST,
    *,
    drain: float = DEFAULT_PACING.drain,
    settle: float = DEFAULT_PACING.settle,
    dump_dir: Path | None = None,
    on_run: Callable[[Path, Run], None] | None = None,
    update: bool = False,
) -> Iterator[Check]:
    """One check per cell, then one per wildcard allowlist entry that masked nothing anywhere it applied.

    `on_run` sees each cell's run, for checks beyond the events (e.g. the bridge's other lines). With `update`,
    a cell that would fail only on its events (no stall) has its goldens rewritten from the replay instead, and
    passes as UPDATED with the diff it accepted (`accept`).
    """
    entries = read_allowlist(allowlist)
    pacing = Pacing(drain=drain, settle=settle)
    for cell in cells:
        provider = cell.resolve().parent.name
        name = f"{provider}/{cell.resolve().name}"
        if cell.resolve().name == PROCESS_SCOPE:
            yield Check(name, True, "process-scoped cell (initialize, process-wide calls): not replayed", case=name,
                        skipped=True)  # fmt: skip
            continue
        golden_path = golden_root / name / RAW
        if not golden_path.exists() and not update:
            yield Check(name, False, case=name, detail=f"  no golden at {golden_path} (bless the cell: bbridge golden {cell} --out "
                        f"{golden_root})")  # fmt: skip
            continue
        golden = (
            [line for line in golden_path.read_text(encoding="utf-8").split("\n") if line]
            if golden_path.exists()
            else []
        )
        live = Run.of(trio.run(_replay, command, cell, pacing))
        if dump_dir is not None:
            dump_dir.mkdir(parents=True, exist_ok=True)
            (dump_dir / f"{provider}-{cell.name}.ndjson").write_bytes(
                b"".join(encode_event(e) + b"\n" for e in live.events)
            )
            (dump_dir / f"{provider}-{cell.name}.stderr").write_text(live.stderr, encoding="utf-8")
        if on_run is not None:
            on_run(cell, live)
        numbered = recorded_by_bbridge(cell)
        check = compare(name, golden, live, entries, numbered=numbered)
        if update and not check.ok and not live.stalls:
            check = accept(check, name, live, golden_root, numbered=numbered)
        yield check
    for entry in entries:
        if entry.cell == "*" and entry.matched and not entry.masked:
            yield Check(f"{entry.describe()} masks nothing in {entry.matched} cell(s) (stale)", False)


def accept(check: Check, name: str, live: Run, golden_root: Path, *, numbered: bool = False) -> Check:
    """The replay blessed as the cell's goldens (`raw-events.ndjson`, `grammar-drops.json`, its pins): UPDATED,
    with the diff accepted (`numbered`: its provider handles numbered, as `bbridge golden` writes them).
    `raw-events.coalesced.ndjson` is left as it was: it needs the recorded clock, which a live replay does not
    have (re-record and `bbridge golden` renew it)."""
    write_events(golden_root / name, number_handles(live.events) if numbered else live.events, live.dropped, None)
    write_counts(golden_root, {name: counts_of(live.events, live.dropped)})
    diff = check.diff or check.detail
    return Check(check.name, True, diff, diff=check.diff, updated=True, case=check.case)


async def _replay(command: list[str], cell: Path, pacing: Pacing) -> Replay:
    return await replay_cell(command, cell, GOLDEN_LANE, pacing, stderr_limit=None)
