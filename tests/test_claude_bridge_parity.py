"""Recorded `claude-code` cells replayed through `bridges.claude_code` (the fake CLI of protocol.md §6.4) equal the goldens.

Needs ../shared (skips with a reason without it). The allowlist is the committed one (empty: every cell is
byte-identical); an entry that masks nothing fails as stale.
"""

from __future__ import annotations

import sys

import pytest

from bbridge.replay import bridge_parity
from tests.conftest import REPO, missing_reason, shared_path

RECORDINGS = shared_path("recordings", "claude-code")
CELLS = sorted(p for p in RECORDINGS.iterdir() if p.is_dir()) if RECORDINGS is not None else []
ALLOWLIST = REPO / "conformance" / "claude-code-parity-allowlist.json"
pytestmark = pytest.mark.skipif(RECORDINGS is None, reason=missing_reason("recordings", "claude-code"))


def test_every_claude_code_cell_matches_its_golden() -> None:
    golden = shared_path("golden")
    assert golden is not None
    bridge = [sys.executable, "-m", "bridges.claude_code"]
    # the §6.3 default quiet windows, as `make claude-parity`: shorter ones lost late output when the whole suite
    # loaded the machine (the driver also awaits each recorded event count, the final one included)
    checks = list(bridge_parity.check_cells(bridge, CELLS, golden, allowlist=ALLOWLIST))
    failures = [check.line() for check in checks if not check.ok]
    assert not failures, "\n".join(failures)
    assert len(checks) == len(CELLS) >= 13
    assert bridge_parity.read_allowlist(ALLOWLIST) == []
