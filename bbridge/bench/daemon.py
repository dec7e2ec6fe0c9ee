"""End-to-end daemon throughput and added latency: fake bridge subprocess → daemon → socket client subprocess.

The daemon runs in this process exactly as `bbridge serve --socket` runs it
(coalescing off, so every delta is its own event); the fake bridge and the
client are separate processes (see their modules). Phase one writes the
stream as fast as the pipe takes it, `blasts` times; phase two paces it at
half the measured throughput and reads the probe stamps.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

from bbridge.config import ProviderConfig
from bbridge.daemon import Daemon
from bbridge.server import serve_socket

THREADS = 8
PACED_SHARE = 0.5


def percentile(values: list[int], share: float) -> float:
    """Nearest-rank percentile (`share` in 0..1) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


async def _client_phases(socket: Path, prompts: list[str]) -> list[dict[str, Any]]:
    command = [sys.executable, "-m", "bbridge.bench.client", str(socket), *prompts]
    done = await trio.run_process(command, capture_stdout=True)
    phases: list[dict[str, Any]] = json.loads(done.stdout)["phases"]
    return phases


def _rate(phase: dict[str, Any]) -> float:
    return float(phase["deltas"]) / ((phase["done_ns"] - phase["started_ns"]) / 1e9)


def _ms(values: list[int], share: float) -> float:
    return round(percentile(values, share) / 1e6, 3)


async def _measure(turns: int, paced_turns: int, blasts: int) -> dict[str, Any]:
    bridge = ProviderConfig(command=[sys.executable, "-m", "bbridge.bench.fake_bridge"])
    daemon = Daemon({"bench": bridge}, text_delta_flush_ms=0)
    with tempfile.TemporaryDirectory(prefix="bbridge-bench-") as tmp:
        socket = Path(tmp) / "bench.sock"
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_socket, daemon, socket)
            blast = await _client_phases(socket, [f"blast {turns} {THREADS}"] * blasts)
            rate = statistics.median(_rate(phase) for phase in blast)
            paced_rate = max(1000, int(rate * PACED_SHARE))
            (paced,) = await _client_phases(socket, [f"paced {paced_turns} {THREADS} {paced_rate}"])
            daemon.request_shutdown()
    saturated = [ns for phase in blast for ns in phase["latencies_ns"]]
    return {
        "stream_deltas": blast[0]["deltas"],
        "events_per_run": blast[0]["events"],
        "runs": blasts,
        "deltas_per_s": round(rate),
        "latency_load_deltas_per_s": round(_rate(paced)),
        "latency_samples": len(paced["latencies_ns"]),
        "first_delta_p50_ms": _ms(paced["latencies_ns"], 0.5),
        "first_delta_p99_ms": _ms(paced["latencies_ns"], 0.99),
        "saturated_first_delta_p50_ms": _ms(saturated, 0.5),
        "saturated_first_delta_p99_ms": _ms(saturated, 0.99),
        "grammar_drops": daemon.counters.grammar_drops,
        "rejected_notifications": daemon.counters.rejected_notifications,
    }


def bench_daemon(turns: int, paced_turns: int, blasts: int) -> dict[str, Any]:
    return trio.run(_measure, turns, paced_turns, blasts)
