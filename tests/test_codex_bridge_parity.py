"""Recorded `codex` cells replayed through `python -m bridges.codex` (the fake app-server of protocol.md §6.4).

Two checks per run, from one replay of each cell:
- the assembled events equal the goldens (`conformance/codex-parity-allowlist.json` masks named differences;
  it is empty, and an entry that masks nothing fails as stale);
- every other line the bridge wrote (results, errors, `thread/identity`, `error`, `session/replaced`, its own
  requests) equals the cell's `bridge→runtime.current` lane, byte for byte as JSON text, in order. Excluded:
  the harness's own `initialize`, and answers to the maintenance methods, which describe the recording host
  (codex-bridge.md §2.3: not replayed). The `model-list` cell's recorded `initialize` result predates
  `grammarVersions` and `steerMode`; it is compared with the line the reference emits today (§2.1).

Needs ../shared (skips with a reason without it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from bbridge.core import js
from bbridge.replay import bridge_parity
from bbridge.wire.recording import RUNTIME_TO_BRIDGE, bridge_lane, read_cell
from tests.conftest import REPO, missing_reason, shared_path
from tests.support import capabilities

RECORDINGS = shared_path("recordings", "codex")
CELLS = sorted(p for p in RECORDINGS.iterdir() if p.is_dir()) if RECORDINGS is not None else []
ALLOWLIST = REPO / "conformance" / "codex-parity-allowlist.json"
HOST_DEPENDENT = frozenset(
    {"provider/health", "provider/usage", "provider/installation/status", "provider/installation/run"}
)
CURRENT_CAPABILITIES = capabilities(
    sessionRestore=True, threadArchive=True, threadRename=True, threadGoalClear=True, fork="checkpoint",
    approvalEnforcedBy="runtime", steerMode="inject",
)  # fmt: skip
pytestmark = pytest.mark.skipif(RECORDINGS is None, reason=missing_reason("recordings", "codex"))


def runtime_methods(cell: Path) -> dict[Any, str]:
    """The method of each runtime request id in the cell."""
    methods: dict[Any, str] = {}
    for entry in read_cell(cell):
        if entry.dir == RUNTIME_TO_BRIDGE:
            message = js.parse(entry.line)
            if isinstance(message, dict) and "id" in message and isinstance(message.get("method"), str):
                methods[message["id"]] = message["method"]
    return methods


def comparable(message: dict[str, Any], methods: dict[Any, str]) -> bool:
    if message.get("method") == "thread/delta" or message.get("id") == "parity-initialize":
        return False
    answered = methods.get(message["id"]) if "method" not in message and "id" in message else None
    return answered not in HOST_DEPENDENT


def expected_control(cell: Path) -> list[str]:
    methods = runtime_methods(cell)
    lines: list[str] = []
    for entry in bridge_lane(cell):
        message = js.parse(entry.line)
        if not comparable(message, methods):
            continue
        if "method" not in message and methods.get(message.get("id")) == "initialize":
            message["result"]["capabilities"] = CURRENT_CAPABILITIES
        lines.append(js.stringify(message))
    return lines


def test_every_codex_cell_matches_its_golden_and_its_recorded_lane() -> None:
    golden = shared_path("golden")
    assert golden is not None
    bridge = [sys.executable, "-m", "bridges.codex"]
    lanes: dict[str, list[str]] = {}

    def keep(cell: Path, run: bridge_parity.Run) -> None:
        methods = runtime_methods(cell)
        lanes[cell.name] = [js.stringify(m) for m in run.control if comparable(m, methods)]

    checks = list(bridge_parity.check_cells(bridge, CELLS, golden, allowlist=ALLOWLIST, on_run=keep))
    failures = [check.line() for check in checks if not check.ok]
    assert not failures, "\n".join(failures)
    assert len(checks) == len(CELLS) >= 15
    assert bridge_parity.read_allowlist(ALLOWLIST) == []
    for cell in CELLS:
        assert lanes[cell.name] == expected_control(cell), f"{cell.name}: control lines differ"
