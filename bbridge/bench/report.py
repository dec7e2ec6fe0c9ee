"""`bbridge bench`: every figure of BENCHMARKS.md, printed as one JSON object (the last line with `--json`)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

from bbridge.bench.core import bench_core, events_per_1000_tokens
from bbridge.wire.recording import find_cells

SHARED_CORPUS = Path("../shared/recordings")
OWN_CORPUS = Path(__file__).resolve().parents[2] / "recordings"
COALESCING_FLUSH_MS = 100  # the daemon's default text coalescing window

# The reference assembler cannot run here (its TypeScript source is not on this machine): these are the
# figures shared/golden/README.md gives for node v20 on the same machine kind, not a measurement of this run.
REFERENCE = {
    "deltas_per_s_readme": 77_000,
    "validate_assemble_per_s_readme": 100_000,
    "assemble_only_per_s_readme": [150_000, 290_000],
    "measured_in_this_run": False,
    "source": "shared/golden/README.md (node v20, 2 vCPU, medians of 20 in-process runs)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line (else indented)")
    parser.add_argument(
        "--corpus", type=Path, metavar="DIR", help="recordings root (default: ../shared/recordings, else recordings/)"
    )
    parser.add_argument("--runs", type=int, default=30, help="core: timed in-process runs (the median counts)")
    parser.add_argument("--turns", type=int, default=4000, help="daemon: turns of 64 deltas per blast")
    parser.add_argument("--blasts", type=int, default=5, help="daemon: unpaced runs (the median counts)")
    parser.add_argument("--paced-seconds", type=float, default=1.5, help="daemon: length of each paced phase")
    parser.add_argument("--idle-threads", type=int, default=10_000, help="memory: threads that ran one turn")
    parser.add_argument("--open-threads", type=int, default=1_000, help="memory: threads holding an open turn")


def default_corpus() -> Path:
    for root in (SHARED_CORPUS, OWN_CORPUS):
        if root.is_dir() and find_cells(root):
            return root
    raise FileNotFoundError(f"no recorded cells under {SHARED_CORPUS} or {OWN_CORPUS} (use --corpus DIR)")


def memory_mb(kind: str, threads: int) -> float:
    """Resident growth measured in a fresh interpreter, so nothing else this process did counts."""
    command = [sys.executable, "-m", "bbridge.bench.memory", kind, str(threads)]
    done = subprocess.run(command, capture_output=True, check=True)
    return float(json.loads(done.stdout)["mb"])


def machine() -> dict[str, Any]:
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        model = next(
            (line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if "model name" in line), ""
        )
    return {
        "cpus": os.cpu_count(),
        "cpu": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "msgspec": msgspec.__version__,
    }


def _progress(text: str) -> None:
    print(f"bbridge bench: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bbridge.bench.daemon import bench_daemon  # the daemon stack loads only when benchmarking

    corpus: Path = args.corpus if args.corpus is not None else default_corpus()
    _progress(f"core over {corpus}")
    core = bench_core(corpus, args.runs)
    core["ratio_vs_reference"] = round(core["deltas_per_s"] / REFERENCE["deltas_per_s_readme"], 2)
    _progress("daemon end to end")
    daemon = bench_daemon(args.turns, args.blasts, args.paced_seconds)
    _progress("memory")
    memory = {
        "idle_threads": args.idle_threads,
        "idle_threads_10k_mb": memory_mb("idle", args.idle_threads),
        "open_threads": args.open_threads,
        "open_turns_1k_mb": memory_mb("open", args.open_threads),
    }
    coalescing = {
        "flush_ms": COALESCING_FLUSH_MS,
        "tokens_per_ms": 1,
        "events_per_1000_tokens": events_per_1000_tokens(COALESCING_FLUSH_MS),
    }
    targets = {
        "core_twice_reference": core["ratio_vs_reference"] >= 2,
        "core_150k": core["deltas_per_s"] >= 150_000,
        "daemon_200k": daemon["deltas_per_s"] >= 200_000,
        "first_delta_p99_under_1ms": daemon["first_delta_p99_ms"] < 1,
        "idle_10k_under_100mb": memory["idle_threads_10k_mb"] < 100,
    }
    return {
        "machine": machine(),
        "reference": REFERENCE,
        "core": core,
        "daemon": daemon,
        "memory": memory,
        "coalescing": coalescing,
        "targets": targets,
    }


def main(args: argparse.Namespace) -> int:
    from bbridge import logs

    logs.configure("warning")
    result = run(args)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0
