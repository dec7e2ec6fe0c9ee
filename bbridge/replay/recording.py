"""A finished recording: every cell under a record root gets a `README` and a `manifest.json` saying how it was
made (command, provider, bbridge version, date) and what was redacted (patterns and counts, never the secrets).

`bbridge run --record DIR` and `bbridge serve --record DIR` call `finish` when their daemon stops. The lanes the
daemon and kit bridges wrote were redacted line by line as they were written (`bbridge.wire.redact`); `finish`
runs the same redaction over every lane once more, which catches the provider lanes of a bridge that writes them
without the kit, and sums the writers' counts with its own.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from bbridge.wire.lanes import BRIDGE_TO_RUNTIME, DIRECTIONS, PROCESS_SCOPE, RUNTIME_TO_BRIDGE, LaneEntry, lane_path
from bbridge.wire.redact import Pattern, Redactor, read_counts, shown


@dataclass(frozen=True)
class MadeBy:
    """How a recording was made: the command line, each provider's bridge command, the bbridge version."""

    command: str
    providers: Mapping[str, str]  # provider id -> its bridge command line
    version: str
    at: str = ""  # ISO date and time (UTC); now when empty


class _Line(msgspec.Struct):
    line: str


def finish(
    root: Path, made_by: MadeBy, patterns: Sequence[Pattern], names: Mapping[str, str] | None = None
) -> list[Path]:
    """README and manifest.json in every cell of `root/<provider>/<cell>`; `names` renames cells (thread scope ->
    cell name) first. Returns the cells, sorted."""
    at = made_by.at or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    redactor = Redactor(patterns)
    cells = []
    for provider_dir in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        for scope, name in (names or {}).items():
            source, target = provider_dir / scope, provider_dir / name
            if source.is_dir() and source != target:
                if target.exists():
                    raise FileExistsError(f"{target}: a cell of that name is already recorded (remove it first)")
                shutil.move(source, target)
        for cell in sorted(p for p in provider_dir.iterdir() if p.is_dir() and _lanes(p)):
            counts = _previous_counts(cell) + read_counts(cell, remove=True)
            lines = {}
            for direction, path in _lanes(cell).items():
                lines[direction] = _redact_lane(path, redactor, counts)
            thread = _thread_of(cell)
            manifest = {
                "provider": provider_dir.name,
                "cell": cell.name,
                "threadId": thread,
                "scope": "process" if cell.name == PROCESS_SCOPE else "thread",
                "recordedAt": at,
                "madeBy": {
                    "command": redactor.line(made_by.command, Counter()),  # a prompt may hold a secret too
                    "bridge": made_by.providers.get(provider_dir.name, ""),
                    "bbridge": made_by.version,
                },
                "bridgeRuns": _runs(cell),
                "lines": lines,
                "redactions": [
                    {"name": p.name, "pattern": shown(p), "replaced": counts.get(p.name, 0)} for p in patterns
                ],
            }
            (cell / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
            (cell / "README").write_text(_readme(manifest), encoding="utf-8")
            cells.append(cell)
    return cells


def recorded_by_bbridge(cell: Path) -> bool:
    """Whether bbridge's record mode made the cell: its manifest names `madeBy` (`finish` writes it; the
    reference's cells and hand-made ones have none). Such a cell's handles are numbered (`bbridge.replay.handles`)."""
    try:
        manifest = json.loads((cell / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and isinstance(manifest.get("madeBy"), dict)


def _previous_counts(cell: Path) -> Counter[str]:
    """What an earlier `finish` of this cell counted (lanes are appended to: a cell's counts add up)."""
    try:
        manifest = json.loads((cell / "manifest.json").read_text(encoding="utf-8"))
        return Counter({str(r["name"]): int(r["replaced"]) for r in manifest.get("redactions", [])})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return Counter()


def _lanes(cell: Path) -> dict[str, Path]:
    return {d: lane_path(cell, d) for d in DIRECTIONS if lane_path(cell, d).exists()}


def _redact_lane(path: Path, redactor: Redactor, counts: Counter[str]) -> int:
    """Redact a lane file in place (only the entries whose line changed are re-encoded); its line count."""
    raw_lines = [raw for raw in path.read_bytes().split(b"\n") if raw.strip()]
    if not redactor:
        return len(raw_lines)
    out = []
    changed = False
    for raw in raw_lines:
        entry = msgspec.json.decode(raw)
        text = msgspec.json.decode(raw, type=_Line).line
        redacted = redactor.line(text, counts)
        if redacted != text:
            entry["line"] = redacted
            raw = msgspec.json.encode(entry)
            changed = True
        out.append(raw)
    if changed:
        path.write_bytes(b"".join(line + b"\n" for line in out))
    return len(out)


def _entries(cell: Path, direction: str) -> list[LaneEntry]:
    path = lane_path(cell, direction)
    if not path.exists():
        return []
    decoded = (msgspec.json.decode(raw, type=LaneEntry) for raw in path.read_bytes().split(b"\n") if raw.strip())
    return list(decoded)


def _thread_of(cell: Path) -> str | None:
    """The bb thread the cell's runtime lane names (its first `params.threadId`)."""
    for entry in _entries(cell, RUNTIME_TO_BRIDGE):
        try:
            params = json.loads(entry.line).get("params") or {}
        except (ValueError, AttributeError):
            continue
        if isinstance(params, dict) and isinstance(params.get("threadId"), str):
            return str(params["threadId"])
    return None


def _runs(cell: Path) -> int:
    return len({e.run for d in (RUNTIME_TO_BRIDGE, BRIDGE_TO_RUNTIME) for e in _entries(cell, d)})


def _readme(manifest: dict[str, Any]) -> str:
    made = manifest["madeBy"]
    assert isinstance(made, dict)
    lines = manifest["lines"]
    assert isinstance(lines, dict)
    redactions = manifest["redactions"]
    assert isinstance(redactions, list)
    cell = f"{manifest['provider']}/{manifest['cell']}"
    text = [
        f"# Recording {cell}",
        "",
        f"Made by `{made['command']}` on {manifest['recordedAt']} with {made['bbridge']}.",
        f"Bridge (provider `{manifest['provider']}`): `{made['bridge'] or 'unknown'}`.",
        f"Thread: {manifest['threadId'] or 'none (process scope: initialize and process-wide calls)'}; "
        f"bridge runs: {manifest['bridgeRuns']}.",
        "Lanes: " + ", ".join(f"{direction} {count} lines" for direction, count in lines.items()) + ".",
        "",
        "## Redactions",
        "",
    ]
    if not redactions:
        text.append("None: the lanes are as they crossed the wire.")
    else:
        text += [
            "Every lane line was redacted before it was written (matches replaced by `[redacted:NAME]`; string",
            "values only, so each line stays valid JSON); the patterns are listed, what they matched is not.",
            "",
            "| name | pattern | replaced |",
            "| --- | --- | --- |",
        ]
        text += [f"| {r['name']} | `{_cell_text(r['pattern'])}` | {r['replaced']} |" for r in redactions]
    text += [
        "",
        "## Use",
        "",
        "Bless: `bbridge golden CELL_DIR --out GOLDEN_ROOT` (expected events and pinned counts).",
        'Replay: `bbridge parity bridge --provider-cmd "BRIDGE" --golden GOLDEN_ROOT CELL_DIR` (README: "Testing your',
        'bridge in CI").',
    ]
    return "\n".join(text) + "\n"


def _cell_text(pattern: str) -> str:
    """A pattern inside a Markdown table cell: its pipes escaped."""
    return pattern.replace("|", "\\|")
