"""Recorded `pi` cells replayed through `bridges.pi` (the fake `pi --mode rpc` of `bbridge.replay.pi_rpc`) equal the
goldens.

Needs ../shared (skips with a reason without it). The allowlist is the committed one (empty: every cell is
byte-identical); an entry that masks nothing fails as stale.
"""

from __future__ import annotations

import sys

import pytest

from bbridge.replay import bridge_parity
from tests.conftest import REPO, missing_reason, shared_path

RECORDINGS = shared_path("recordings", "pi")
CELLS = sorted(p for p in RECORDINGS.iterdir() if p.is_dir()) if RECORDINGS is not None else []
ALLOWLIST = REPO / "conformance" / "pi-parity-allowlist.json"
pytestmark = pytest.mark.skipif(RECORDINGS is None, reason=missing_reason("recordings", "pi"))


def test_every_pi_cell_matches_its_golden() -> None:
    golden = shared_path("golden")
    assert golden is not None
    checks = list(bridge_parity.check_cells([sys.executable, "-m", "bridges.pi"], CELLS, golden, allowlist=ALLOWLIST))
    failures = [check.line() for check in checks if not check.ok]
    assert not failures, "\n".join(failures)
    assert len(checks) == len(CELLS) >= 8
    assert bridge_parity.read_allowlist(ALLOWLIST) == []
