"""The daemon's own overhead of a Perspectives panel on instant workers (issue 48, "`bbridge bench` reports the
daemon's own overhead of a 7-lens run on instant fake workers").

A real `Daemon` with the Perspectives room served beside it in process (its face, its tools through a real tool
host audited to a file, as `bbridge serve` with a `[perspectives]` table runs them) and two bench bridges
(`panel_bridge`): the calling agent, whose turn calls `gather_perspectives` with seven lenses, and the panel, whose
every member answers its prompt at once. A run is then nothing but the daemon and the room at work: the tuples
resolved (every provider's `model/list`), nine hidden threads constructed, prompted, followed and released (the
planner through `ai/complete`'s path with its schema check, seven workers at once, the synthesis), and the one
delivery into the calling thread.

`gather7_s` is one run's wall time at the calling agent, from just before its tool call's line is written to just
after the delivery's line is read (the bridge's monotonic clock); `per_hidden_thread_ms` divides it by the run's
hidden threads. `cpu_s` is this process's CPU (the daemon, the room, the bench's own client: the bridges and the
tool host's argument checker are processes of their own) from the calling turn's start until the run's hidden
threads are released. The first `WARMUP` runs are left out (the first starts the argument checker's process and
warms every path); the runs are one after another, each waiting for the last's threads to be released. Absolute
seconds, as the hosted call's figures are: the cost of a run is round trips and constructions, not decoding
throughput, and no target is set.
"""

from __future__ import annotations

import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from bbridge.bench.daemon import percentile
from bbridge.client import Client
from bbridge.daemon import server
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.runtime import Daemon
from bbridge.perspectives.room import Perspectives
from bbridge.perspectives.run import Run
from bbridge.perspectives.settings import PerspectivesConfig, PhaseTuple
from bbridge.serving import in_process, room_face
from bbridge.toolhost.audit import Audit
from bbridge.toolhost.catalog import Catalog
from bbridge.toolhost.host import Host

WARMUP = 1
LENSES = ("latency", "memory", "allocations", "locking", "input and output", "caching", "algorithms")
CALLER = "bench-caller"
FLUSH_MS = 100  # `bbridge serve`'s default text coalescing window
FULL = {"permissionMode": "full", "permissionScope": "full", "approvalReviewer": None, "permissionEscalation": None}
TIMEOUT_S = 120.0  # the whole phase's bound: a run that never delivers fails the bench, never hangs it
SETTLE_POLL_S = 0.002  # how often the driver looks whether a run's threads are released (outside the timed span)


def _bridge(*args: str) -> ProviderConfig:
    return ProviderConfig(command=[sys.executable, "-m", "bbridge.bench.panel_bridge", *args])


def _config() -> PerspectivesConfig:
    """Every phase on the instant panel; budgets no run comes near."""
    panel = PhaseTuple(provider="panel")
    return PerspectivesConfig(planner=panel, worker=panel, planner_s=30, wrapup_s=60, hard_cap_s=100, synthesis_s=30)


async def _turns_completed(client: Client, counted: list[int]) -> None:
    """Counts the calling thread's completed turns (a run is two: the call's and the delivery's)."""
    async for entry in client.events(CALLER):
        if entry.event.get("type") == "turn/completed":
            counted[0] += 1


async def _settled(daemon: Daemon, room: Perspectives, turns: list[int], want: int, seen: set[str]) -> Run:
    """The one run not `seen` before, once its delivery's turn has ended and every one of its hidden threads is
    released."""
    while True:
        fresh = [run for run in room.runs.values() if run.run_id not in seen]
        if turns[0] >= want and len(fresh) == 1 and fresh[0].phase == "done":
            (run,) = fresh
            panel = daemon.supervisor.bridges.get("panel")
            if panel is None or not panel.threads.intersection(run.hidden_ids()):
                seen.add(run.run_id)
                return run
        await trio.sleep(SETTLE_POLL_S)


async def _drive(daemon: Daemon, room: Perspectives, cwd: str, runs: int) -> list[tuple[Run, float]]:
    """`WARMUP + runs` panels, one after another: each run and this process's CPU seconds over it."""
    done: list[tuple[Run, float]] = []
    async with (
        in_process(daemon, "bench-perspectives", server.DEFAULT_QUEUE_BYTES) as stream,
        Client.over(stream, token=daemon.token) as client,
        trio.open_nursery() as nursery,
    ):
        await client.request("thread/start", {"providerId": "caller", "threadId": CALLER, "cwd": cwd, "options": FULL})
        turns = [0]
        nursery.start_soon(_turns_completed, client, turns)
        text = "gather " + " ".join(lens.replace(" ", "-") for lens in LENSES)
        seen: set[str] = set()
        for n in range(WARMUP + runs):
            cpu = time.process_time()
            await client.request("turn/start", {"threadId": CALLER, "input": [{"type": "text", "text": text}]})
            run = await _settled(daemon, room, turns, 2 * (n + 1), seen)
            done.append((run, time.process_time() - cpu))
        nursery.cancel_scope.cancel()
    return done[WARMUP:]


async def _panels(runs: int) -> tuple[list[tuple[Run, float]], list[dict[str, Any]]]:
    with tempfile.TemporaryDirectory(prefix="bbridge-bench-") as tmp:
        report = Path(tmp) / "deliveries.ndjson"
        room = Perspectives(_config())
        host = Host(Catalog([], [], [], []), audit=Audit(Path(tmp) / "tool-audit.ndjson"), external=room.tools)
        providers = {"caller": _bridge("caller", str(report)), "panel": _bridge("panel")}
        daemon = Daemon(providers, text_delta_flush_ms=FLUSH_MS, tool_host=host, services=[room])
        try:
            with trio.fail_after(TIMEOUT_S):
                async with trio.open_nursery() as nursery:
                    await nursery.start(server.serve, daemon, [room_face(room)])
                    timed = await _drive(daemon, room, tmp, runs)
                    daemon.request_shutdown()
        finally:
            host.close()
        deliveries = [json.loads(line) for line in report.read_text(encoding="utf-8").splitlines()]
    return timed, deliveries[WARMUP:]


def _member_seconds(run: Run, role: str) -> float:
    return max((member.seconds() for member in run.members if member.role == role), default=0.0)


def bench_perspectives(runs: int) -> dict[str, Any]:
    """The panel figures over `runs` timed 7-lens runs (the median run's, every run's wall time beside it)."""
    gc.collect()  # what an earlier phase left young is not collected inside this one (see `bench_daemon`)
    timed, deliveries = trio.run(_panels, runs)
    if len(deliveries) != len(timed) or any(d["result"] != "result" for d in deliveries):
        raise RuntimeError(f"bbridge bench: a Perspectives run did not deliver its result: {deliveries}")
    walls = [(d["delivered_ns"] - d["call_ns"]) / 1e9 for d in deliveries]
    receipts = [(d["receipt_ns"] - d["call_ns"]) / 1e6 for d in deliveries]
    cpus = [cpu for _, cpu in timed]
    median = sorted(range(len(walls)), key=walls.__getitem__)[(len(walls) - 1) // 2]
    run, _ = timed[median]
    hidden = len(run.members)
    if run.outcome != "delivered" or [m.status for m in run.members].count("completed") != hidden:
        raise RuntimeError(f"bbridge bench: a Perspectives run ended {run.outcome}: {run.view()}")
    wall, cpu = walls[median], percentile([round(c * 1e6) for c in cpus], 0.5) / 1e6
    return {
        "lenses": len(LENSES),
        "runs": len(walls),
        "warmup_runs": WARMUP,
        "hidden_threads": hidden,
        "gather7_s": round(wall, 4),
        "gather7_s_runs": [round(w, 4) for w in walls],
        "gather7_s_worst": round(max(walls), 4),
        "per_hidden_thread_ms": round(wall * 1000 / hidden, 2),
        "receipt_p50_ms": round(percentile([round(r * 1000) for r in receipts], 0.5) / 1000, 2),
        "cpu_s": round(cpu, 4),
        "cpu_per_hidden_thread_ms": round(cpu * 1000 / hidden, 2),
        "planner_s": round(_member_seconds(run, "planner"), 4),
        "slowest_worker_s": round(_member_seconds(run, "worker"), 4),
        "synthesis_s": round(_member_seconds(run, "synthesis"), 4),
    }
