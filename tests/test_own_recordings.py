"""The project's own recordings (recordings/echo/*): what a fresh clone tests against."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bbridge.core.events import EVENT_TYPES
from bbridge.replay.cells import replay_cell
from bbridge.replay.parity import check_recordings
from bbridge.wire.lanes import find_cells

ROOT = Path(__file__).resolve().parent.parent / "recordings"


def test_every_own_cell_is_pinned_and_replays_to_its_pins() -> None:
    cells = {cell.relative_to(ROOT).as_posix() for cell in find_cells(ROOT)}
    assert cells == {"echo/plain-turn", "echo/deltas-all", "echo/steer", "echo/interrupt", "echo/failure"}
    checks = list(check_recordings(ROOT, ROOT / "no-golden"))
    assert len(checks) == 3 * len(cells)
    assert [c.line() for c in checks if not c.ok] == []


def test_the_deltas_all_cell_holds_all_30_event_types() -> None:
    replay = replay_cell(ROOT / "echo" / "deltas-all", "echo")
    assert {event["type"] for event in replay.events} == set(EVENT_TYPES)
    assert replay.drops == [] and replay.rejected == []


def test_the_interrupt_cell_settles_before_the_stop_answer() -> None:
    replay = replay_cell(ROOT / "echo" / "interrupt", "echo")
    completed = [e for e in replay.events if e["type"] == "turn/completed"]
    assert [e["status"] for e in completed] == ["interrupted"]


def test_the_parity_cli_on_own_recordings() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bbridge", "parity", "recordings", str(ROOT), "--golden", str(ROOT / "no-golden")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "15 passed, 0 failed"
