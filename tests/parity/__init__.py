"""Parity over the recorded cells of ../shared, one row per provider.

`tests/test_bridge_parity.py` replays each provider's cells through its live bridge (`BRIDGES`) and
`tests/test_translate_parity.py` feeds them to its translator alone (`TRANSLATORS`); a new provider is one row in
each. The provider modules here (`claude_code`, `codex`, `pi`) hold what one provider's checks need beyond the
shared shape: its translator replay, and for codex the bridge's control lane.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bbridge.replay import bridge_parity
from tests.conftest import missing_reason, shared_path
from tests.parity import claude_code, codex, pi


def recorded_cells(provider: str, lane: str | None = None) -> list[Path]:
    """The provider's recorded cells (those holding `lane`, when given); none without ../shared."""
    root = shared_path("recordings", provider)
    if root is None:
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (lane is None or (p / lane).exists()))


@dataclass(frozen=True)
class Bridge:
    """One provider replayed through its live bridge against the goldens."""

    recordings: str  # the folder under ../shared/recordings (the goldens' too)
    module: str  # `python -m <module>`
    allowlist: str  # under conformance/
    allowlisted: int  # its entries, pinned: the list cannot grow
    min_cells: int
    drain: float = bridge_parity.DEFAULT_PACING.drain  # the replay profile's quiet windows (protocol.md §6.3)
    settle: float = bridge_parity.DEFAULT_PACING.settle
    # a check on each cell's run beyond its events: why it fails, or None
    also: Callable[[Path, bridge_parity.Run], str | None] | None = None

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", self.module]

    @property
    def missing(self) -> str | None:
        """Why the test skips: the recordings are absent."""
        return None if shared_path("recordings", self.recordings) else missing_reason("recordings", self.recordings)


BRIDGES = {
    # the fake agent plays ACP; shorter quiet windows than §6.3's defaults keep the ten cells quick
    "acp": Bridge(
        "acp-cursor", "bridges.acp", "acp-parity-allowlist.json", allowlisted=1, min_cells=10, drain=0.15, settle=0.3
    ),
    # §6.3's default windows, as `make claude-parity`: shorter ones lost late output when the whole suite loaded the
    # machine (the driver also awaits each recorded event count, the final one included)
    "claude-code": Bridge(
        "claude-code", "bridges.claude_code", "claude-code-parity-allowlist.json", allowlisted=0, min_cells=13
    ),
    "codex": Bridge(
        "codex",
        "bridges.codex",
        "codex-parity-allowlist.json",
        allowlisted=0,
        min_cells=15,
        also=codex.control_lane_difference,
    ),
    "pi": Bridge("pi", "bridges.pi", "pi-parity-allowlist.json", allowlisted=0, min_cells=8),
}

# provider (its recordings folder) -> (recorded cell -> (translated lines, recorded lines)); only cells with a
# provider lane are translated
TRANSLATORS: dict[str, Callable[[Path], tuple[list[str], list[str]]]] = {
    "claude-code": claude_code.pair,
    "codex": codex.pair,
    "pi": pi.pair,
}
