"""Recorded `acp-cursor` cells replayed through `bridges.acp` (with the fake agent) equal the goldens.

Needs ../shared (skips with a reason without it). The allowlist is the committed one; every entry must mask
something in the run, so a fixed difference makes its entry fail as stale.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bbridge.core.events import Event, encode_event
from bbridge.replay import bridge_parity
from tests.conftest import REPO, missing_reason, shared_path

RECORDINGS = shared_path("recordings", "acp-cursor")
CELLS = sorted(p for p in RECORDINGS.iterdir() if p.is_dir()) if RECORDINGS is not None else []
BRIDGE = [sys.executable, "-m", "bridges.acp"]
pytestmark = pytest.mark.skipif(RECORDINGS is None, reason=missing_reason("recordings", "acp-cursor"))


def test_every_cell_matches_its_golden() -> None:
    golden = shared_path("golden")
    assert golden is not None
    checks = list(bridge_parity.check_cells(BRIDGE, CELLS, golden, drain=0.15, settle=0.3))
    failures = [check.line() for check in checks if not check.ok]
    assert not failures, "\n".join(failures)
    assert len(checks) == len(CELLS) >= 10


def test_cli_prints_one_line_per_cell_and_the_summary(tmp_path: Path) -> None:
    golden = shared_path("golden")
    assert golden is not None
    cell = next(c for c in CELLS if c.name == "approval-allow")
    command = [sys.executable, "-m", "bbridge", "parity", "bridge", "--provider-cmd", " ".join(BRIDGE)]
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
