"""The scale phase: many threads streaming at a model's pace through several bridges to several clients.

`bbridge serve --socket` runs as its own process, as deployed (text coalescing on, the default 100 ms window),
with B providers, each a `bbridge.bench.scale_bridge` process. C clients connect (`bbridge.bench.scale_client`);
the last one also starts N threads round robin over the bridges and one turn on each: about SECONDS long at RATE
tokens per second (text and reasoning, a tool call, a command with streamed output, usage, the boundary). Each
client checks every thread's events (each seq once, in order, nothing left in the journal after the last it saw)
and reads the first-delta latency of every text stream (bridge write → client receipt).

Measured over the streaming window (every turn/start answered → every turn completed): the daemon's CPU time
over wall time (its share of one core, from /proc), its peak RSS, the deltas it took in per second
(`daemon/status` counters), the events each client received per second, p50/p99 first-delta latency, and events
lost or duplicated. `daemon_cpu_s` is the daemon's CPU from the first turn/start to the end: all the work of
the phase, the same in every run however long slow clients (or a starved driver) stretch the window that divides
the share. `capacity` runs the phase at growing thread counts and reports the most threads whose p99
first-delta stayed under a bound with nothing lost.

`transport` picks how the clients reach it: `socket` (the Unix socket) or `ws` (`--listen 127.0.0.1:PORT`, the
clients on `ws://…/rpc`, the token in the upgrade's bearer header). `relay="floor"` puts `bbridge.bench.floor` in
the daemon's place (the same bridges, clients and transport; the bridges' lines forwarded as they are, the clients
counting them): the floor the daemon's CPU is a multiple of. `relay="traced"` is the daemon with `[telemetry]`: every
turn a span (the bridges' turns open and close through it; usage, the delivery's notices), made by OpenTelemetry's
SDK, batched and exported over OTLP/HTTP to a real receiver on loopback in the bench's process (`otlp_sink`, which
decodes and counts them: `spans_exported`), so the daemon's CPU against the plain daemon's is what tracing costs.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket as stdlib_socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

from bbridge.bench.otlp_sink import Sink, otlp_sink
from bbridge.bench.scale_bridge import turn_plan

CAPACITY_P99_MS = 100.0
START_SPREAD_S = 1.5  # `first_delta_p99_ms_after_start` counts the samples received this long after the turns start
CAPACITY_STEPS = (1000, 2000, 4000, 8000, 16000)
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15 of stat)


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _ms(values: list[int], share: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return round(ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))] / 1e6, 3)


def _line(stream: IO[str], expected: str) -> None:
    got = stream.readline().strip()
    if got != expected:
        raise RuntimeError(f"scale client said {got!r}, not {expected!r}")


def _config(root: Path, bridges: int, traces: str | None = None) -> Path:
    command = json.dumps([sys.executable, "-m", "bbridge.bench.scale_bridge"])
    path = root / "bbridge.toml"
    text = "".join(f"[providers.scale{n}]\ncommand = {command}\n\n" for n in range(bridges))
    if traces is not None:  # the traced daemon: its spans to the bench's receiver
        text += f'[telemetry]\notlp_endpoint = "{traces}"\n'
    path.write_text(text)
    return path


def _free_port() -> int:
    with stdlib_socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _accepts(socket: Path, port: int | None) -> bool:
    """Whether the relay accepts connections yet (a Unix socket's path exists; a TCP connect succeeds)."""
    if port is None:
        return socket.exists()
    try:
        stdlib_socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _relay_argv(
    relay: str, root: Path, bridges: int, socket: Path, port: int | None, traces: str | None = None
) -> list[str]:
    if relay == "floor":
        where = ["--socket", str(socket)] if port is None else ["--port", str(port)]
        return [sys.executable, "-m", "bbridge.bench.floor", str(bridges), *where]
    token_file = root / "token"
    where = ["--socket", str(socket)] if port is None else ["--listen", f"127.0.0.1:{port}"]
    config = ["--config", str(_config(root, bridges, traces)), "--token-file", str(token_file)]
    return [sys.executable, "-m", "bbridge", "serve", *where, *config, "--log-level", "error"]


def run_scale(
    threads: int,
    bridges: int,
    clients: int,
    seconds: float,
    rate: float,
    extra: tuple[str, ...] = (),
    transport: str = "socket",
    relay: str = "daemon",
) -> dict[str, Any]:
    """One run of the phase; every process it starts is stopped before it returns."""
    with ExitStack() as stack:
        sink = stack.enter_context(otlp_sink()) if relay == "traced" else None
        run = _run_scale(threads, bridges, clients, seconds, rate, extra, transport, relay, sink)
    if sink is not None:  # read once the daemon has exited: its last batch is sent as it stops
        run["spans_exported"] = sink.spans
    return run


def _run_scale(
    threads: int,
    bridges: int,
    clients: int,
    seconds: float,
    rate: float,
    extra: tuple[str, ...],
    transport: str,
    relay: str,
    sink: Sink | None,
) -> dict[str, Any]:
    timeout = seconds * 3 + 60 + threads / 100
    before, began = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bbridge-scale-") as tmp:
        root = Path(tmp)
        socket = root / "d.sock"
        port = _free_port() if transport == "ws" else None
        token_file = root / "token"
        token_file.write_text("bench-token\n")
        token_file.chmod(0o600)
        traces = sink.url if sink is not None else None
        serve = subprocess.Popen([*_relay_argv(relay, root, bridges, socket, port, traces), *extra])
        target = str(socket) if port is None else f"ws://127.0.0.1:{port}/rpc"
        mode = "count" if relay == "floor" else "check"
        started: list[subprocess.Popen[str]] = []
        try:
            deadline = time.monotonic() + 30
            while not _accepts(socket, port):
                if serve.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {relay} did not start")
                time.sleep(0.02)
            base = [sys.executable, "-m", "bbridge.bench.scale_client"]
            sizes = [str(threads), str(timeout), str(bridges), str(seconds), str(rate)]
            for _ in range(clients - 1):
                watch = [*base, "watch", target, str(token_file), mode, *sizes]
                started.append(subprocess.Popen(watch, stdout=subprocess.PIPE, text=True))
                assert started[-1].stdout is not None
                _line(started[-1].stdout, "ready")
            drive = [*base, "drive", target, str(token_file), mode, *sizes]
            driver = subprocess.Popen(drive, stdout=subprocess.PIPE, text=True)
            started.append(driver)
            assert driver.stdout is not None
            _line(driver.stdout, "ready")
            _line(driver.stdout, "turning")
            cpu_turning = _cpu_s(serve.pid)
            _line(driver.stdout, "turns")
            cpu0, wall0 = _cpu_s(serve.pid), time.monotonic()
            reports = [json.loads(proc.communicate(timeout=timeout)[0].strip().splitlines()[-1]) for proc in started]
            cpu1, wall1 = _cpu_s(serve.pid), time.monotonic()
            rss = _peak_rss_mb(serve.pid)
        finally:
            for proc in started:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=60)
    after, ended = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    everything_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    drive_report = reports[-1]
    window_s = (max(r["done_ns"] for r in reports) - drive_report["turns_started_ns"]) / 1e9
    latencies = [ns for r in reports for ns in r["latencies_ns"]]
    # the reasoning streams' first deltas arrive within the turns' start offsets (under a second), while the
    # thread/start and turn/start requests are still being served; the other streams' first deltas come later
    settled_ns = drive_report["turns_started_ns"] + START_SPREAD_S * 1e9
    later = [
        ns for r in reports for ns, at in zip(r["latencies_ns"], r["received_ns"], strict=True) if at >= settled_ns
    ]
    per_turn = len(turn_plan("x", seconds, rate))
    counters = drive_report["counters"]
    lost = sum(threads - r["threads_completed"] + r["gaps"] + r["lost_at_tail"] for r in reports)
    return {
        "relay": relay,
        "transport": transport,
        "threads": threads,
        "bridges": bridges,
        "clients": clients,
        "seconds": seconds,
        "tokens_per_s": rate,
        "window_s": round(window_s, 2),
        "offered_deltas": threads * per_turn,
        "offered_deltas_per_s": round(threads * per_turn / window_s),
        "delivered_deltas_per_s": round(counters["deltas_in"] / window_s),
        "events_per_s_per_client": round(sum(r["events"] for r in reports) / clients / window_s),
        "daemon_cpu_share": round((cpu1 - cpu0) / (wall1 - wall0), 3),
        # the CPU of all the work, from the first turn/start to the last event: the same in every run, however long
        # the clients (or a starved driver) stretch the window; the ratios between relays and transports use it
        "daemon_cpu_s": round(cpu1 - cpu_turning, 2),
        "daemon_peak_rss_mb": rss,
        # the CPU of every process the run started (daemon, bridges, clients) over the whole run, setup included:
        # how much of the machine's cores the phase itself took
        "all_processes_cpu_share": round(everything_s / (ended - began), 3),
        "first_delta_samples": len(latencies),
        "first_delta_p50_ms": _ms(latencies, 0.5),
        "first_delta_p99_ms": _ms(latencies, 0.99),
        "first_delta_max_ms": _ms(latencies, 1.0),
        "first_delta_p99_ms_after_start": _ms(later, 0.99),
        "first_delta_samples_after_start": len(later),
        "events_lost": lost,
        "events_duplicated": sum(r["duplicates"] for r in reports),
        "deltas_in": counters["deltas_in"],
        "clients_disconnected_slow": counters["clients_disconnected_slow"],
        "grammar_drops": counters["grammar_drops"],
    }


def capacity(bridges: int, clients: int, seconds: float, rate: float, steps: tuple[int, ...]) -> dict[str, Any]:
    """The most threads (of `steps`, then one step halfway to the first failure; below the first step, halving)
    with p99 first-delta under `CAPACITY_P99_MS` and nothing lost, duplicated or dropped."""

    def holds(run: dict[str, Any]) -> bool:
        clean = run["events_lost"] == run["events_duplicated"] == run["clients_disconnected_slow"] == 0
        return bool(clean and run["first_delta_p99_ms"] < CAPACITY_P99_MS)

    runs: list[dict[str, Any]] = []
    best, failed = 0, 0
    for threads in steps:
        runs.append(run_scale(threads, bridges, clients, seconds, rate))
        if not holds(runs[-1]):
            failed = threads
            break
        best = threads
    if failed and best:
        middle = (best + failed) // 2
        runs.append(run_scale(middle, bridges, clients, seconds, rate))
        best = middle if holds(runs[-1]) else best
    while failed and not best and failed > max(bridges, 16):  # not even the first step held: halve until one does
        failed //= 2
        runs.append(run_scale(failed, bridges, clients, seconds, rate))
        best = failed if holds(runs[-1]) else 0
    brief = ("threads", "first_delta_p99_ms", "daemon_cpu_share", "daemon_peak_rss_mb", "events_lost")
    return {
        "p99_bound_ms": CAPACITY_P99_MS,
        "threads": best,
        "limited_by_steps": failed == 0,
        "runs": [{k: run[k] for k in brief} for run in runs],
    }
