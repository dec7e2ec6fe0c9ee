"""The daemon's resource soak (tools/soak_daemon.py, `make soak-daemon`), run for a few seconds: the load reaches
every part it is there for (threads released idle and resumed, hosted tool calls, a bridge stopped idle, WebSocket
clients), the samples are taken, and nothing is left after the daemon's shutdown; its slopes are least squares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tools.soak_daemon import BOOT, FLAT, Sample, floor, slope, trend


def test_a_short_soak_exercises_everything_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    argv = [sys.executable, "-m", "tools.soak_daemon", "--seconds", "6", "--sample-s", "1", "--threads", "4",
            "--pace-s", "0.1", "--idle-release-s", "0.5", "--bridge-idle-exit-s", "1", "--burst-s", "3",
            "--ws-s", "0.5", "--budget-s", "0.5", "--mcp-every", "3", "--tracemalloc", "1", "--out", str(out)]  # fmt: skip
    done = subprocess.run(
        argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert json.loads(done.stdout.splitlines()[-1]) == report and report["problems"] == []
    counters, tally = report["counters"], report["tally"]
    assert counters["idle_releases"] > 0 and counters["idle_resumes"] > 0 and counters["idle_bridge_stops"] > 0
    assert counters["hosted_calls"] > 0 and counters["hosted_calls_failed"] == 0
    assert tally["turns"] > 0 and tally["tool_turns"] > 0 and tally["burst_threads"] > 0
    assert tally["ws_status"] > 0 and tally["ws_listeners"] > 0 and tally["ws_drops"] > 0
    assert len(report["samples"]) >= 5 and all(s["rss_kib"] > 0 and s["fds"] > 0 for s in report["samples"])
    assert max(s["children"] for s in report["samples"]) >= 1  # its bridges (and the thread's MCP servers)
    after = report["afterShutdown"]
    assert after["descendantsSeen"] > 0 and after["descendantsAlive"] == [] and after["processesInWorkDir"] == {}
    assert after["socketFileGone"] and after["portClosed"] and report["daemonExit"] == 0
    assert set(FLAT) <= set(report["trend"]) and report["census"]["turns"] > 0
    assert 0 < report["census"]["rssKiBAfterTrim"] <= report["census"]["rssKiB"][1]  # glibc gave back what it kept
    memory = report["census"]["memory"]  # where the RSS lives: glibc's heap, the threads (pymalloc: see below)
    assert memory["threads"][1] >= 1 and memory["inUseBytes"][1] > 0 and memory["heapBytes"][1] > 0
    assert memory["arenas"] == [None, None]  # tracing replaces pymalloc's hooks, and then it has no statistics
    allocated = report["census"]["allocatedAt"]
    assert allocated and all(where and isinstance(kib, float) for where, kib, _ in allocated)  # by line
    assert report["budgets"] == "exercised"  # each pool thread's first turn spends, then its later ones trip
    assert tally["budget_turns"] > 0 and tally["budget_trips"] > 0


def test_the_slopes_are_least_squares_over_the_window() -> None:
    assert slope([(0, 1), (1, 3), (2, 5)]) == 2.0 and slope([(0, 4)]) == 0.0
    samples = [Sample(t, 1000 + (t if t >= 100 else 0) * 72, 20, 3, 0.0, 0, {}) for t in range(0, 201, 10)]
    got = trend(samples, window_s=100)
    assert got["windowS"] == 100 and got["samples"] == 11
    assert got["rssKiB"]["slopePerHour"] == 72 * 3600 and not got["rssKiB"]["flat"]  # 7,200 KiB over the window
    assert got["fds"] == {**got["fds"], "slopePerHour": 0.0, "flat": True} and got["children"]["flat"]


def test_descriptors_and_processes_are_judged_by_their_floor() -> None:
    """What is in flight at a sample comes and goes (a peak every third sample, late in the window, is no leak);
    a descriptor leaked every minute raises the floor, and is one."""
    peaks = [Sample(t, 1000, 20 + (12 if t > 600 and t % 30 == 0 else 0), 3, 0.0, 0, {}) for t in range(0, 1201, 10)]
    assert trend(peaks, window_s=1200)["fds"]["flat"]
    assert floor([(0, 5), (10, 3), (70, 9), (80, 8), (90, 9)]) == [(0, 3), (10, 3), (70, 8), (80, 8), (90, 8)]
    leaking = [Sample(t, 1000, 20 + t // 60 + (12 if t % 30 == 0 else 0), 3, 0.0, 0, {}) for t in range(0, 1201, 10)]
    assert not trend(leaking, window_s=1200)["fds"]["flat"]
    falling = [Sample(t, 1000, 40 - t // 60, 3, 0.0, 0, {}) for t in range(0, 1201, 10)]
    assert trend(falling, window_s=1200)["fds"]["flat"]  # fewer at the end: nothing leaked
    # minutes with more at work (a process up a few minutes, its descriptors with it), late in the window: the base
    # level is back under them, where a leak's is not
    busy = [Sample(t, 1000, 21 + (8 if 900 <= t < 1140 else 0), 2 + (t >= 900 and t < 1140), 0.0, 0, {})
            for t in range(0, 1201, 10)]  # fmt: skip
    got = trend(busy, window_s=1200)
    assert got["fds"]["overWindow"] > 2 and got["fds"]["base"] == [21, 21] and got["fds"]["flat"]
    assert got["children"]["flat"] and got["children"]["rise"] == 0
    assert trend(leaking, window_s=1200)["fds"]["rise"] >= 10


def test_the_census_says_where_the_memory_lives(tmp_path: Path) -> None:
    """Not tracing, pymalloc says how many arenas it holds and how much of them live blocks fill."""
    where = BOOT.split("def census")[0] + "import json; print(json.dumps(where()))"
    done = subprocess.run(
        [sys.executable, "-c", where], env={**os.environ, "SOAK_CENSUS": str(tmp_path / "census")},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    memory = json.loads(done.stdout)
    assert memory["arenas"] > 0 and 0 < memory["blocksBytes"] < memory["arenas"] * 2**20
    assert memory["threads"] >= 1 and memory["inUseBytes"] > 0 and memory["heapBytes"] > 0
