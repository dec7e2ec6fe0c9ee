"""Byte-parity checks against the reference's golden outputs.

`check_recordings` compares replayed recording cells with `golden/<provider>/<cell>/`
and the pinned counts (a cell bbridge recorded with its provider handles numbered on both sides:
`bbridge.replay.handles`); `run_case` replays one synthetic differential case
(golden/synthetic/README.md) step by step.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from bbridge.core import grammar
from bbridge.core.assembler import Assembler
from bbridge.core.events import encode_event
from bbridge.core.guard import Guard
from bbridge.replay.cells import GOLDEN_ENTROPY, Replay, replay_cell
from bbridge.replay.golden import COUNTS, counts_of, drops_json
from bbridge.replay.handles import number_handles, number_lines
from bbridge.replay.recording import recorded_by_bbridge
from bbridge.wire.lanes import find_cells


@dataclass
class Check:
    """One result; `diff` is a unified diff of what differed (for JUnit and `--update`), `updated` a failure
    whose goldens were rewritten (`parity bridge --update`)."""

    name: str
    ok: bool
    detail: str = ""
    diff: str = ""
    updated: bool = False
    case: str = ""  # the test case's name in a JUnit report (the cell), when `name` is longer
    skipped: bool = False  # not run (a process-scoped cell): neither passed nor failed

    def line(self) -> str:
        if self.skipped:
            return f"SKIP {self.name}" + (f" — {self.detail}" if self.detail else "")
        if self.updated:
            return f"UPDATED {self.name}" + (f"\n{self.detail}" if self.detail else "")
        head = f"{'PASS' if self.ok else 'FAIL'} {self.name}"
        return head if self.ok or not self.detail else f"{head}\n{self.detail}"


def _first_difference(expected: list[str], got: list[str]) -> str:
    for index in range(max(len(expected), len(got))):
        want = expected[index] if index < len(expected) else "<end of output>"
        have = got[index] if index < len(got) else "<end of output>"
        if want != have:
            return f"  line {index + 1}:\n    expected: {want}\n    got:      {have}"
    return ""


def _compare_lines(name: str, golden: Path, events: list[dict[str, Any]], numbered: bool) -> Check:
    """`numbered`: both sides with their provider handles numbered (a cell bbridge recorded)."""
    expected = [line for line in golden.read_text(encoding="utf-8").split("\n") if line]
    if numbered:
        expected, events = number_lines(expected), number_handles(events)
    got = [encode_event(e).decode() for e in events]
    return Check(name, expected == got, _first_difference(expected, got))


def _check_golden(cell: Path, name: str, provider_id: str, golden: Path, raw: Replay) -> Iterator[Check]:
    numbered = recorded_by_bbridge(cell)
    if (golden / "raw-events.ndjson").exists():
        yield _compare_lines(f"{name} raw-events", golden / "raw-events.ndjson", raw.events, numbered)
    coalesced_path = golden / "raw-events.coalesced.ndjson"
    if coalesced_path.exists():
        coalesced = replay_cell(cell, provider_id, flush_ms=100, clock="recorded")
        yield _compare_lines(f"{name} raw-events.coalesced", coalesced_path, coalesced.events, numbered)
    drops_path = golden / "grammar-drops.json"
    if drops_path.exists():
        want = json.loads(drops_path.read_text(encoding="utf-8"))
        got = drops_json(raw.drops)
        detail = "" if want == got else f"  expected: {json.dumps(want)}\n  got:      {json.dumps(got)}"
        yield Check(f"{name} grammar-drops", want == got, detail)


def check_cell(
    cell: Path, name: str, provider_id: str, golden: Path | None, pins: dict[str, Any] | None
) -> Iterator[Check]:
    """Golden files where a golden folder exists; pinned counts wherever the cell is pinned."""
    raw = replay_cell(cell, provider_id)
    if golden is not None:
        yield from _check_golden(cell, name, provider_id, golden, raw)
    if pins is not None:
        counts = counts_of(raw.events, raw.drops)
        for key, value in counts.items():
            if key in pins:
                ok = pins[key] == value
                yield Check(f"{name} {key}", ok, "" if ok else f"  expected: {pins[key]}\n  got:      {value}")


def check_recordings(root: Path, golden_root: Path) -> Iterator[Check]:
    """Pins from `ROOT/row-counts.json`, else from `GOLDEN_ROOT/row-counts.json` (where `bbridge golden` writes)."""
    counts_path = root / COUNTS if (root / COUNTS).exists() else golden_root / COUNTS
    pinned = json.loads(counts_path.read_text(encoding="utf-8")) if counts_path.exists() else {}
    for cell in find_cells(root):
        name = cell.relative_to(root).as_posix()
        golden = golden_root / name
        if golden.is_dir():
            yield from check_cell(cell, name, cell.parent.name, golden, pinned.get(name))
        elif name in pinned:  # the project's own cells: pinned counts, no reference golden
            yield from check_cell(cell, name, cell.parent.name, None, pinned[name])


# -- synthetic differential cases --------------------------------------------


@dataclass
class CaseResult:
    case_id: str
    ok: bool
    step: int = -1
    expected: str = ""
    got: str = ""


def run_case(case: dict[str, Any]) -> CaseResult:
    """Replay one case exactly as the reference harness did; stop at the first differing step."""
    assembler = Assembler(case["providerId"], GOLDEN_ENTROPY, progress_throttle_ms=500, text_delta_flush_ms=100)
    guard = Guard()
    for index, (step, expected) in enumerate(zip(case["steps"], case["expected"], strict=True)):
        try:
            params = grammar.convert_params({"threadId": step["threadId"], "deltas": step["deltas"]})
        except grammar.GrammarError as exc:
            if expected.get("rejected") is True:
                continue
            return CaseResult(case["id"], False, index, _dump(expected), f"rejected: {exc}")
        if expected.get("rejected") is True:
            return CaseResult(case["id"], False, index, _dump(expected), "accepted")
        events = assembler.assemble(params.threadId, params.deltas, step["now"])
        drops = []
        for position, event in enumerate(events):
            violation = guard.observe(event)
            if violation is not None:
                drops.append({"index": position, "rule": violation.rule, "eventType": event["type"]})
        got = msgspec.json.encode({"events": events, "grammarDrops": drops}).decode()
        want = _dump(expected)
        if got != want:
            return CaseResult(case["id"], False, index, want, got)
    return CaseResult(case["id"], True)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def read_cases(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as handle:
        for raw in handle:
            if raw.strip():
                yield msgspec.json.decode(raw)
