"""`bbridge bench`'s page figure at a small size: its JSON (never its timings), and its skip."""

from __future__ import annotations

import pytest

from bbridge.bench import chromium
from bbridge.bench.page import bench_page
from tests.browser.support import ensure_browser


def test_the_page_figure_times_chromium_rendering_a_journal() -> None:
    ensure_browser()
    figure = bench_page(300, 2)
    assert figure["events"] >= 300 and figure["turns"] >= 1
    assert figure["render_ms"] in figure["render_ms_runs"] and len(figure["render_ms_runs"]) == 2
    for key in ("render_ms_runs", "first_event_ms", "longest_task_ms"):
        assert all(type(ms) is int for ms in figure[key]), (key, figure)
    assert figure["timeline_elements"] >= figure["turns"] * 3  # a prompt, the answer, the turn's end at least
    assert figure["chromium"].split(".")[0].isdigit()


def test_without_chromium_the_figure_says_why_it_was_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chromium, "unavailable", lambda: "no chromium here")
    assert bench_page(300, 1) == {"skipped": "no chromium here"}
