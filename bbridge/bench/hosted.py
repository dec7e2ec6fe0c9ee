"""The daemon's own cost of a hosted tool call, and what a trivial tool's spawn costs (issue 35, "Measured").

A real `Daemon` with a real tool host (`Host`, one `policy = "allow"` command tool, `echo {n}`, audited to a
file as a daemon with a journal is) serves a bench bridge (`hosted_bridge`) that sends `item/tool/call`s for
that tool one at a time and times each from its request to the daemon's answer. The host's runner is timed per
call around `runner.run` as the host awaits it (spawn, the process's life, its pipes read, its reaping: all the
tool process costs); a call's own cost is its round trip less that run. The first `WARMUP` calls are left out
of the percentiles (the first starts the daemon's argument-checker process); the first is reported alone.

The spawn figure is `runner.run` of `/bin/true` (no arguments, no output), timed alone in a loop: what running
the most trivial tool costs, however the daemon got there.
"""

from __future__ import annotations

import gc
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import trio

from bbridge.bench.daemon import percentile
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.runtime import Daemon
from bbridge.daemon.server import serve_socket
from bbridge.toolhost import runner
from bbridge.toolhost.audit import Audit
from bbridge.toolhost.catalog import Catalog
from bbridge.toolhost.declarations import HostedTool
from bbridge.toolhost.host import Host
from bbridge.wire import rpc

WARMUP = 5  # calls before the timed ones: the first starts the argument checker's process
THREAD = "bench-hosted"
TOOL = "bench_echo"
SCHEMA = {"type": "object", "properties": {"n": {"type": "string"}}, "required": ["n"]}
TIMEOUT_S = 120.0  # the whole phase's bound: a daemon that stops answering fails the bench, never hangs it


def _tool(name: str, command: list[str]) -> HostedTool:
    program = shutil.which(command[0])
    if program is None:
        raise FileNotFoundError(f"bbridge bench: no {command[0]!r} on PATH for the hosted-call phase")
    return HostedTool(
        name=name,
        source="bbridge bench",
        description=f"{command[0]}, for the benchmark",
        command=[program, *command[1:]],
        schema=SCHEMA if len(command) > 1 else {"type": "object"},
        policy="allow",
    )


@contextmanager
def timed_runs() -> Iterator[dict[str, int]]:
    """Every `runner.run` the host awaits meanwhile, timed (ns), by the call's `n` argument."""
    untimed = runner.run
    runs: dict[str, int] = {}

    async def timed(
        tool: HostedTool,
        arguments: Mapping[str, Any],
        cwd: str | None,
        environ: Mapping[str, str],
        trace: Mapping[str, str] | None = None,
    ) -> runner.Run:
        started = time.monotonic_ns()
        try:
            return await untimed(tool, arguments, cwd, environ, trace)
        finally:
            runs[str(arguments.get("n"))] = time.monotonic_ns() - started

    runner.run = timed
    try:
        yield runs
    finally:
        runner.run = untimed


async def _drive(socket: Path, cwd: str, calls: int) -> None:
    """A client: starts the thread (hosted tools are offered to every construction) and its one turn, then
    waits until that turn completes."""
    stream = await trio.open_unix_socket(str(socket))
    done = trio.Event()

    async def on_notes(batch: list[rpc.Notification]) -> None:
        for note in batch:
            if note.method == "thread/events" and note.params is not None:
                params = msgspec.json.decode(note.params)
                types = {entry["event"]["type"] for entry in params["events"]}
                if params["threadId"] == THREAD and "turn/completed" in types:
                    done.set()

    conn = rpc.Connection(stream, stream, name="bench-hosted", on_notifications=on_notes)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        await conn.request("initialize", {"client": {"name": "bbridge-bench", "version": "0"}})
        await conn.request("thread/start", {"providerId": "bench", "threadId": THREAD, "cwd": cwd})
        text = f"hosted {WARMUP + calls} {TOOL}"
        turn = {"threadId": THREAD, "clientRequestId": "creq_bench00000", "input": [{"type": "text", "text": text}]}
        await conn.request("turn/start", turn)
        await done.wait()
        await conn.aclose()
        nursery.cancel_scope.cancel()


def _ms(values: list[int], share: float) -> float:
    return round(percentile(values, share) / 1e6, 3)


async def _hosted_calls(calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bbridge-bench-") as tmp:
        report = Path(tmp) / "calls.json"
        bridge = ProviderConfig(command=[sys.executable, "-m", "bbridge.bench.hosted_bridge", str(report)])
        catalog = Catalog([_tool(TOOL, ["echo", "{n}"])], [], [], [])
        host = Host(catalog, audit=Audit(Path(tmp) / "tool-audit.ndjson"))
        daemon = Daemon({"bench": bridge}, text_delta_flush_ms=0, tool_host=host)
        try:
            with trio.fail_after(TIMEOUT_S), timed_runs() as runs:
                async with trio.open_nursery() as nursery:
                    await nursery.start(serve_socket, daemon, Path(tmp) / "bench.sock")
                    await _drive(Path(tmp) / "bench.sock", tmp, calls)
                    daemon.request_shutdown()
        finally:
            host.close()
        bridge_saw = json.loads(report.read_text(encoding="utf-8"))
    if bridge_saw["failed"]:
        raise RuntimeError(f"bbridge bench: hosted calls {bridge_saw['failed']} did not succeed")
    total = bridge_saw["calls_ns"]
    run = [runs[str(n)] for n in range(len(total))]
    own = [t - r for t, r in zip(total, run, strict=True)][WARMUP:]
    total, run = total[WARMUP:], run[WARMUP:]
    return {
        "calls": len(own),
        "warmup_calls": WARMUP,
        "first_call_ms": round(bridge_saw["calls_ns"][0] / 1e6, 3),
        "own_p50_ms": _ms(own, 0.5),
        "own_p99_ms": _ms(own, 0.99),
        "call_p50_ms": _ms(total, 0.5),
        "call_p99_ms": _ms(total, 0.99),
        "tool_run_p50_ms": _ms(run, 0.5),
        "tool_run_p99_ms": _ms(run, 0.99),
    }


async def _spawns(count: int, cwd: str) -> list[int]:
    tool = _tool("bench_true", ["true"])
    timings = []
    for _ in range(WARMUP + count):
        started = time.monotonic_ns()
        done = await runner.run(tool, {}, cwd, {})
        timings.append(time.monotonic_ns() - started)
        if done.status != "ok":
            raise RuntimeError(f"bbridge bench: {tool.command[0]} did not run: {done.result}")
    return timings[WARMUP:]


def bench_hosted(calls: int) -> dict[str, Any]:
    """The hosted-call figures over `calls` timed calls, and the spawn figures over as many runs of `/bin/true`."""
    gc.collect()  # what an earlier phase left young is not collected inside this one (see `bench_daemon`)
    figures = trio.run(_hosted_calls, calls)
    with tempfile.TemporaryDirectory(prefix="bbridge-bench-") as cwd:
        spawns = trio.run(_spawns, calls, cwd)
    return {
        **figures,
        "spawn_tool": "true",
        "spawns": len(spawns),
        "spawn_p50_ms": _ms(spawns, 0.5),
        "spawn_p99_ms": _ms(spawns, 0.99),
    }
