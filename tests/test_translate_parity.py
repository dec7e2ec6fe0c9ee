"""Each provider's translator alone against its recorded cells: byte parity of the `thread/delta` output.

One row per provider in `tests.parity.TRANSLATORS` (its replay of a cell's lanes into the translator, the way its
bridge applies them, is in `tests/parity/<provider>.py`). Cells that still differ are listed with a reason under
their provider in `translate_gaps.json`; a listed cell that starts matching fails too, so the list only shrinks.
Needs ../shared (skips with a reason without it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import missing_reason, shared_path
from tests.parity import TRANSLATORS, recorded_cells

GAPS_FILE = Path(__file__).with_name("translate_gaps.json")
GAPS: dict[str, dict[str, str]] = json.loads(GAPS_FILE.read_text())
PROVIDER_LANE = "provider→bridge.ndjson"


def cases() -> list[object]:
    """(provider, cell) for every translatable cell; a skipped row for a provider whose recordings are absent."""
    found: list[object] = []
    for provider in TRANSLATORS:
        if shared_path("recordings", provider) is None:
            skip = pytest.mark.skip(reason=missing_reason("recordings", provider))
            found.append(pytest.param(provider, None, marks=skip, id=provider))
        cells = recorded_cells(provider, PROVIDER_LANE)
        found += [pytest.param(provider, cell, id=f"{provider}/{cell.name}") for cell in cells]
    return found


def first_difference(got: list[str], want: list[str]) -> str | None:
    for index, (ours, theirs) in enumerate(zip(got, want, strict=False)):
        if ours != theirs:
            return f"batch {index}:\n ours:   {ours}\n theirs: {theirs}"
    if len(got) != len(want):
        extra = got[len(want)] if len(got) > len(want) else want[len(got)]
        return f"{len(got)} batches, recorded {len(want)}; first unmatched: {extra}"
    return None


@pytest.mark.parametrize(("provider", "cell"), cases())
def test_translator_matches_the_recorded_cell(provider: str, cell: Path) -> None:
    difference = first_difference(*TRANSLATORS[provider](cell))
    if cell.name in GAPS[provider]:
        assert difference is not None, f"{provider}/{cell.name} matches now: remove it from {GAPS_FILE.name}"
        return
    assert difference is None, difference


@pytest.mark.parametrize("provider", TRANSLATORS)
def test_known_gaps_name_real_cells(provider: str) -> None:
    if shared_path("recordings", provider) is None:
        pytest.skip(missing_reason("recordings", provider))
    assert set(GAPS[provider]) <= {cell.name for cell in recorded_cells(provider, PROVIDER_LANE)}
