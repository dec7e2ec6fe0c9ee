"""End-to-end daemon throughput and added latency: fake bridge subprocess → daemon → socket client subprocess.

The daemon runs in this process as `bbridge serve --socket` runs it (text
coalescing off, so every delta is its own event, and a deeper client queue);
the fake bridge and the client are separate processes (see their modules).
Phase one writes the stream as fast as the pipe takes it, `blasts` times, each
beside a slice of the core's yardstick (the share is the ratio of their sums). Phase two paces the same stream at shares of that measured
throughput and reads the probe stamps: the added latency of the first delta of
each write.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from bbridge.bench.stream import DELTAS_PER_TURN
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.runtime import Daemon
from bbridge.daemon.server import serve_socket

THREADS = 8
# The client's outbound queue (bytes). `serve` keeps 64 MiB and drops a client that falls further behind; this
# measures throughput, not the slow-client policy, so a benchmark client the OS deschedules never gets near it.
CLIENT_QUEUE_BYTES = 1 << 30
LOAD_SHARES = (0.1, 0.25, 0.5)  # paced phases, as shares of the measured throughput
HEADLINE_SHARE = 0.5


def percentile(values: list[int], share: float) -> int:
    """Nearest-rank percentile (`share` in 0..1) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


async def _client_phases(socket: Path, prompts: list[str]) -> list[dict[str, Any]]:
    command = [sys.executable, "-m", "bbridge.bench.daemon_client", str(socket), *prompts]
    done = await trio.run_process(command, capture_stdout=True)
    phases: list[dict[str, Any]] = json.loads(done.stdout)["phases"]
    return phases


def _rate(phase: dict[str, Any]) -> float:
    seconds = (phase["done_ns"] - phase["started_ns"]) / 1e9
    return float(phase["deltas"] / seconds)


def _ms(values: list[int], share: float) -> float:
    return round(percentile(values, share) / 1e6, 3)


def _latency(phase: dict[str, Any], share: float) -> dict[str, Any]:
    samples = phase["latencies_ns"]
    return {
        "load_share": share,
        "deltas_per_s": round(_rate(phase)),
        "samples": len(samples),
        "p50_ms": _ms(samples, 0.5),
        "p99_ms": _ms(samples, 0.99),
        "bridge_late_wakes": phase["bridge_late_wakes"],
    }


async def _measure(turns: int, blasts: int, paced_s: float, yardstick: Callable[[], float]) -> dict[str, Any]:
    bridge = ProviderConfig(command=[sys.executable, "-m", "bbridge.bench.fake_bridge"])
    daemon = Daemon({"bench": bridge}, text_delta_flush_ms=0)
    with tempfile.TemporaryDirectory(prefix="bbridge-bench-") as tmp:
        socket = Path(tmp) / "bench.sock"
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_socket, daemon, socket, CLIENT_QUEUE_BYTES)
            events_before = daemon.journal.log.recorded
            blast, yard = [], []
            for _ in range(blasts):  # a yardstick slice beside each blast: a slow stretch hits both
                yard.append(yardstick())
                blast += await _client_phases(socket, [f"blast {turns} {THREADS}"])
            events_per_run = (daemon.journal.log.recorded - events_before) // blasts
            rate = statistics.harmonic_mean([_rate(phase) for phase in blast])  # equal work: the ratio of sums
            prompts = []
            for share in LOAD_SHARES:
                paced = max(1000, int(rate * share))
                paced_turns = max(THREADS, round(paced * paced_s / DELTAS_PER_TURN))
                prompts.append(f"paced {paced_turns} {THREADS} {paced}")
            paced_phases = await _client_phases(socket, prompts)
            loads = [_latency(phase, share) for phase, share in zip(paced_phases, LOAD_SHARES, strict=True)]
            daemon.request_shutdown()
    headline = next(load for load in loads if load["load_share"] == HEADLINE_SHARE)
    saturated = [ns for phase in blast for ns in phase["latencies_ns"]]
    return {
        "stream_deltas": blast[0]["deltas"],
        "events_per_run": events_per_run,
        "runs": blasts,
        "deltas_per_s": round(rate),
        "yardstick_per_s": round(statistics.harmonic_mean(yard)),
        "share_of_decode_only": round(rate / statistics.harmonic_mean(yard), 3),
        "first_delta_p50_ms": headline["p50_ms"],
        "first_delta_p99_ms": headline["p99_ms"],
        "latency_load_deltas_per_s": headline["deltas_per_s"],
        "latency_bridge_late_wakes": headline["bridge_late_wakes"],
        "latency_by_load": loads,
        "saturated_first_delta_p50_ms": _ms(saturated, 0.5),
        "saturated_first_delta_p99_ms": _ms(saturated, 0.99),
        "grammar_drops": daemon.counters.grammar_drops,
        "rejected_notifications": daemon.counters.rejected_notifications,
    }


def bench_daemon(turns: int, blasts: int, paced_s: float, yardstick: Callable[[], float]) -> dict[str, Any]:
    """`yardstick()` runs one slice of the core's decode-only workload and returns its rate."""
    # A daemon does not share its heap with a benchmark: without a collection here, the first collection inside
    # a timed phase would traverse whatever the core benchmark left young, a stall inside the measurement.
    gc.collect()
    return trio.run(_measure, turns, blasts, paced_s, yardstick)
