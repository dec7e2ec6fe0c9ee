"""`bbridge golden` (issue 37, step 2): a cell blessed by bbridge's own assembler is written in the reference's
golden format, byte for byte, with its pinned counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FILES = ("raw-events.ndjson", "raw-events.coalesced.ndjson", "grammar-drops.json")


def golden(*args: str | Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bbridge", "golden", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("cell", ["claude-code/fork", "acp-cursor/turn-tools", "codex/steer"])
def test_a_blessed_cell_is_the_reference_golden_byte_for_byte(
    cell: str, recordings_root: Path, golden_root: Path, tmp_path: Path
) -> None:
    """acp-cursor/turn-tools has the one grammar drop; codex/steer coalesces text."""
    done = golden(recordings_root / cell, "--out", tmp_path)
    assert done.returncode == 0, done.stderr
    for name in FILES:
        assert (tmp_path / cell / name).read_bytes() == (golden_root / cell / name).read_bytes(), name
    pins = json.loads((recordings_root / "row-counts.json").read_text())[cell]
    pins.pop("rows")  # the reference server's projection: not ported, not written
    written = json.loads((tmp_path / "row-counts.json").read_text())
    assert list(written) == [cell] and written[cell] == pins
    assert list(written[cell]) == ["events", "unhandled", "grammarDrops"]
    assert f"blessed {cell}: events {pins['events']}" in done.stdout


def test_blessing_merges_the_pins_in_the_layout_parity_recordings_reads(tmp_path: Path) -> None:
    cells = sorted((REPO / "recordings" / "echo").iterdir())
    assert golden(cells[0], "--out", tmp_path).returncode == 0
    assert golden(*cells[1:], "--out", tmp_path).returncode == 0
    text = (tmp_path / "row-counts.json").read_text()
    assert text.endswith("}\n") and json.loads(text) == json.loads(
        (REPO / "recordings" / "row-counts.json").read_text()
    )
    checked = subprocess.run(
        [sys.executable, "-m", "bbridge", "parity", "recordings", str(REPO / "recordings"), "--golden", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 0 and checked.stdout.endswith(" 0 failed\n"), checked.stdout


def test_a_folder_that_is_not_a_cell_is_a_usage_error(tmp_path: Path) -> None:
    done = golden(tmp_path / "missing", "--out", tmp_path / "out")
    assert done.returncode == 2 and "not a cell folder" in done.stderr
