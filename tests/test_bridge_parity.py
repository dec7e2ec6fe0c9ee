"""Recorded cells replayed through each provider's live bridge (the fake agent of protocol.md §6.4 playing the
provider lanes) equal the goldens: one row per provider in `tests.parity.BRIDGES`.

Needs ../shared (skips with a reason without it). Each allowlist is the committed one, its length pinned; every
entry must mask something in the run, so a fixed difference makes its entry fail as stale.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bbridge.core.events import Event, encode_event
from bbridge.replay import bridge_parity
from tests.conftest import REPO, shared_path
from tests.parity import BRIDGES, Bridge, recorded_cells


@pytest.mark.parametrize("bridge", BRIDGES.values(), ids=BRIDGES.keys())
def test_every_cell_matches_its_golden(bridge: Bridge) -> None:
    if bridge.missing is not None:
        pytest.skip(bridge.missing)
    golden = shared_path("golden")
    assert golden is not None
    cells = recorded_cells(bridge.recordings)
    allowlist = REPO / "conformance" / bridge.allowlist
    also: list[str] = []

    def check_more(cell: Path, run: bridge_parity.Run) -> None:
        if bridge.also is not None and (problem := bridge.also(cell, run)) is not None:
            also.append(problem)

    runs = bridge_parity.check_cells(
        bridge.command, cells, golden, allowlist, drain=bridge.drain, settle=bridge.settle, on_run=check_more
    )
    checks = list(runs)
    failures = [check.line() for check in checks if not check.ok]
    assert not failures, "\n".join(failures)
    assert len(checks) == len(cells) >= bridge.min_cells
    assert len(bridge_parity.read_allowlist(allowlist)) == bridge.allowlisted
    assert not also, "\n".join(also)


def test_cli_prints_one_line_per_cell_and_the_summary(tmp_path: Path) -> None:
    acp = BRIDGES["acp"]
    if acp.missing is not None:
        pytest.skip(acp.missing)
    golden = shared_path("golden")
    assert golden is not None
    cell = next(c for c in recorded_cells(acp.recordings) if c.name == "approval-allow")
    command = [sys.executable, "-m", "bbridge", "parity", "bridge", "--provider-cmd", " ".join(acp.command)]
    command += ["--golden", str(golden), "--dump-dir", str(tmp_path), str(cell)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=60)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines[0].startswith("PASS acp-cursor/approval-allow: 32 events, golden 31") and "allowlisted: #0" in lines[0]
    assert lines[-1] == "1 passed, 0 failed"
    assert (tmp_path / "acp-cursor-approval-allow.ndjson").read_text().count("\n") == 32


def _event(kind: str, **fields: object) -> Event:
    return {"type": kind, "threadId": "", "providerThreadId": "", "scope": {"kind": "thread"}, **fields}


def test_allowlist_masks_name_and_go_stale() -> None:
    golden = [encode_event(_event("turn/started", id="a")).decode()]
    live = bridge_parity.Run(events=[_event("turn/started", id="a"), _event("thread/name/updated", threadName="t")])
    names = bridge_parity.AllowEntry(0, "acp-x", "*", "", "titles", {"type": "thread/name/updated"})
    idless = bridge_parity.AllowEntry(1, "acp-x", "c", "/id", "ids differ")
    assert not bridge_parity.compare("acp-x/c", golden, live, []).ok
    check = bridge_parity.compare("acp-x/c", golden, live, [names, idless])
    assert check.ok and "allowlisted: #0 (0 golden, 1 replayed), #1 (1 golden, 1 replayed)" in check.name
    stale = bridge_parity.AllowEntry(2, "acp-x", "c", "/nowhere", "nothing")
    check = bridge_parity.compare("acp-x/c", golden, live, [names, stale])
    assert not check.ok and "stale allowlist entry #2" in check.detail


def test_mask_paths_reach_nested_values() -> None:
    events = [_event("item/started", item={"id": "x", "args": [1, 2]})]
    masked, hits = bridge_parity.mask(events, bridge_parity.AllowEntry(0, "*", "*", "/**/args/*", "r"))
    assert hits == 2 and masked[0]["item"]["args"] == [None, None]
