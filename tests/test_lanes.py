"""Reading record-mode lanes (`wire/lanes.py`, assembler.md §15): lanes, merge order, `.current`, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bbridge.wire.lanes import (
    BRIDGE_TO_PROVIDER,
    BRIDGE_TO_RUNTIME,
    DIRECTIONS,
    PROVIDER_TO_BRIDGE,
    RUNTIME_TO_BRIDGE,
    RecordingError,
    bridge_lane,
    find_cells,
    read_cell,
    read_lane,
)


def entry(direction: str, seq: float, line: str, run: float | None = None, ts: float = 5) -> str:
    obj: dict[str, Any] = {"ts": ts}
    if run is not None:
        obj["run"] = run
    obj.update(seq=seq, dir=direction, line=line)
    return json.dumps(obj, ensure_ascii=False)


def write_lane(cell: Path, name: str, *lines: str) -> Path:
    cell.mkdir(parents=True, exist_ok=True)
    path = cell / f"{name}.ndjson"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_directions_in_canonical_order() -> None:
    assert DIRECTIONS == ("runtime→bridge", "bridge→runtime", "provider→bridge", "bridge→provider")


def test_merge_by_run_then_seq_with_fractional_seq_and_missing_run(tmp_path: Path) -> None:
    cell = tmp_path / "p" / "c"
    write_lane(cell, RUNTIME_TO_BRIDGE, entry(RUNTIME_TO_BRIDGE, 1, "r1"), entry(RUNTIME_TO_BRIDGE, 3, "r3"))
    write_lane(
        cell, BRIDGE_TO_RUNTIME, entry(BRIDGE_TO_RUNTIME, 2.5, "b2.5", run=0), entry(BRIDGE_TO_RUNTIME, 2, "b2", run=0)
    )
    write_lane(cell, PROVIDER_TO_BRIDGE, entry(PROVIDER_TO_BRIDGE, 0, "p0-run1", run=1))
    write_lane(
        cell,
        BRIDGE_TO_PROVIDER,
        entry(BRIDGE_TO_PROVIDER, 2.25, "bp2.25"),
        entry(BRIDGE_TO_PROVIDER, 0.5, "bp0.5", run=2),
    )
    merged = read_cell(cell)
    assert [e.line for e in merged] == ["r1", "b2", "bp2.25", "b2.5", "r3", "p0-run1", "bp0.5"]
    assert [e.run for e in merged] == [0, 0, 0, 0, 0, 1, 2]
    assert merged[3].seq == 2.5


def test_merge_is_stable_in_direction_order_for_equal_positions(tmp_path: Path) -> None:
    cell = tmp_path / "p" / "c"
    for direction in reversed(DIRECTIONS):
        write_lane(cell, direction, entry(direction, 7, direction, run=1))
    assert [e.dir for e in read_cell(cell)] == list(DIRECTIONS)
    # within one lane, file order breaks ties
    write_lane(cell, BRIDGE_TO_RUNTIME, entry(BRIDGE_TO_RUNTIME, 1, "first"), entry(BRIDGE_TO_RUNTIME, 1, "second"))
    assert [e.line for e in read_cell(cell) if e.dir == BRIDGE_TO_RUNTIME] == ["first", "second"]


def test_current_lane_replaces_bridge_to_runtime(tmp_path: Path) -> None:
    cell = tmp_path / "p" / "c"
    write_lane(cell, BRIDGE_TO_RUNTIME, entry(BRIDGE_TO_RUNTIME, 1, "old-1"), entry(BRIDGE_TO_RUNTIME, 2, "old-2"))
    write_lane(cell, RUNTIME_TO_BRIDGE, entry(RUNTIME_TO_BRIDGE, 1.5, "r"))
    assert [e.line for e in bridge_lane(cell)] == ["old-1", "old-2"]
    assert [e.line for e in read_cell(cell)] == ["old-1", "r", "old-2"]
    write_lane(
        cell, f"{BRIDGE_TO_RUNTIME}.current", entry(BRIDGE_TO_RUNTIME, 3, "new-3"), entry(BRIDGE_TO_RUNTIME, 1, "new-1")
    )
    assert [e.line for e in bridge_lane(cell)] == ["new-3", "new-1"]  # file order
    assert [e.line for e in read_cell(cell)] == ["new-1", "r", "new-3"]


def test_cell_without_bridge_lane_reads_empty(tmp_path: Path) -> None:
    cell = tmp_path / "p" / "c"
    cell.mkdir(parents=True)
    assert bridge_lane(cell) == []
    assert read_cell(cell) == []


def test_entry_defaults_and_values(tmp_path: Path) -> None:
    path = write_lane(tmp_path, BRIDGE_TO_RUNTIME, json.dumps({"seq": 4, "dir": BRIDGE_TO_RUNTIME, "line": "{}"}))
    (only,) = read_lane(path, BRIDGE_TO_RUNTIME)
    assert (only.ts, only.run, only.seq, only.line) == (0, 0, 4, "{}")


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        '{"ts":1,"run":0,"seq":1,"dir":"bridge→runtime"}',  # no line
        '{"ts":1,"run":0,"seq":"1","dir":"bridge→runtime","line":"{}"}',  # seq is a string
        '{"ts":1,"run":0,"dir":"bridge→runtime","line":"{}"}',  # no seq
        "[1,2,3]",
        '{"ts":1,"run":0,"seq":1,"dir":"bridge→runtime","line":{}}',  # line is not a string
        "[" * 5000 + "]" * 5000,  # nested past the bound
        '{"ts":1,"run":0,"seq":1,"dir":"bridge→runtime","line":"' + "[" * 5000 + "]" * 5000 + '"}',  # the line is
    ],
    ids=["not-json", "no-line", "string-seq", "no-seq", "array", "object-line", "deep", "deep-line"],
)
def test_bad_line_names_file_and_line(tmp_path: Path, bad: str) -> None:
    path = write_lane(tmp_path, BRIDGE_TO_RUNTIME, entry(BRIDGE_TO_RUNTIME, 1, "ok"), "", bad)
    with pytest.raises(RecordingError) as info:
        read_lane(path, BRIDGE_TO_RUNTIME)
    assert str(info.value).startswith(f"{path}:3:")


def test_wrong_dir_names_file_and_line(tmp_path: Path) -> None:
    cell = tmp_path / "p" / "c"
    path = write_lane(cell, BRIDGE_TO_RUNTIME, entry(BRIDGE_TO_RUNTIME, 1, "ok"), entry(RUNTIME_TO_BRIDGE, 2, "x"))
    with pytest.raises(RecordingError) as info:
        read_cell(cell)
    message = str(info.value)
    assert message.startswith(f"{path}:2:")
    assert RUNTIME_TO_BRIDGE in message and BRIDGE_TO_RUNTIME in message


def test_raw_line_separators_inside_strings_do_not_split_lines(tmp_path: Path) -> None:
    payload = "a\u2028b\u2029c\x85d\x0ce\x1cf"
    message = json.dumps({"jsonrpc": "2.0", "method": "thread/delta", "params": {"text": payload}}, ensure_ascii=False)
    first = entry(BRIDGE_TO_RUNTIME, 1, message)
    assert "\u2028" in first  # written raw, not escaped
    path = write_lane(tmp_path, BRIDGE_TO_RUNTIME, first, entry(BRIDGE_TO_RUNTIME, 2, "second"))
    entries = read_lane(path, BRIDGE_TO_RUNTIME)
    assert [e.seq for e in entries] == [1, 2]
    assert json.loads(entries[0].line)["params"]["text"] == payload
    # line numbers in errors count "\n" only
    path.write_text(first + "\n" + first + "\nbroken\n", encoding="utf-8")
    with pytest.raises(RecordingError, match=r":3: "):
        read_lane(path, BRIDGE_TO_RUNTIME)


def test_find_cells(tmp_path: Path) -> None:
    write_lane(tmp_path / "codex" / "b", BRIDGE_TO_RUNTIME)
    write_lane(tmp_path / "codex" / "a", BRIDGE_TO_RUNTIME)
    write_lane(tmp_path / "acp" / "x", BRIDGE_TO_RUNTIME)
    write_lane(tmp_path / "acp" / "no-bridge-lane", RUNTIME_TO_BRIDGE)
    (tmp_path / "row-counts.json").write_text("{}", encoding="utf-8")
    assert [p.relative_to(tmp_path).as_posix() for p in find_cells(tmp_path)] == ["acp/x", "codex/a", "codex/b"]
