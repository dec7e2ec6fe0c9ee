"""A fast client behind a stuck one (issue 46): what the daemon delivers to a reading client while another never reads.

Run from the repository (the daemon is whichever `bbridge` each `--daemon` interpreter imports; the probe, its
bridges and its clients run this tree's code under the probe's own interpreter):

    python -m tools.slow_client_probe                                  # now and stuck/alone, one round each
    python -m tools.slow_client_probe --daemon before=/tmp/venv-before/bin/python \\
        --daemon now=/tmp/venv-now/bin/python --rounds 3 --out runs.jsonl

Each round runs every `--daemon` (in the order given) with the stuck client, then without it: before+stuck,
before alone, now+stuck, now alone, and again. Every run prints one JSON object (`--out` appends it to a file too)
and a summary line on stderr; a table of every run closes the output.

What one run does: `bbridge serve --socket` (the interpreter's own tree, text coalescing at its default 100 ms)
with `--bridges` providers, each a fake streaming bridge (below). The stuck client, when there is one, connects
first, sends `initialize` with the token and never reads its socket again. The fast client (a separate process,
`bbridge.bench.scale_client.Checker`: it decodes and checks every event, each `seq` once and in order) starts
`--threads` threads round robin over the bridges and one turn on each; the bridges then stream `--deltas` deltas in
all, one delta per `thread/delta` line, evenly over `--seconds` (40 threads and 200,000 deltas in 4 s: 1,250 deltas
a second per thread, 50,000 a second in all). Each thread's turn is cycles of a short reasoning text, a tool call with
progress, a command with streamed output and a short answer (`--cycle` deltas a cycle, 50 by default), so a turn
has many text streams. The first delta of each text stream carries the bridge's send time (`@<ns>.<pid>.<n>@`,
`bbridge.bench.scale_bridge.Streams` stamps it when the line is written); the daemon emits that delta's event at
once (the deltas after it, within the 100 ms window, are coalesced into later events), so the first receipt of each
stamp at the fast client is a delivery-latency sample: bridge write → daemon → client read.

Options for the heavier shapes: `--every` stamps every text delta (the samples then include the coalescing hold,
up to the window or the stream's close); `--flush-ms 0` turns coalescing off in the daemon (every delta an event: the
stuck client's outbox reaches its 64 MiB bound within the 4 s); `--hogs N` runs N processes spinning on the CPU
beside each run (the 2-core machine shared with other work, as a fault-test suite's other cases share it).

Reported per run: the fast client's p50/p99/max delivery latency and the p99 of each second of the streaming
window; the window (turn/start sent → every turn completed at the fast client) against the turns' own length; the
daemon's CPU seconds over the window, its share of one core and the highest share of any 0.5 s; the daemon's peak
RSS (VmHWM) and its RSS over time; whether and when (seconds after the turns started) the stuck client was dropped
(the daemon's "disconnecting a client that stopped reading" warning, read from its log as it is written, and the
`clients_disconnected_slow` counter); the deltas the daemon took in; events lost (the journal's tail after the
last seq the client saw) or duplicated; the CPU seconds of the fast client and of the bridges; how long the daemon,
the fast client and the bridges each waited for a core while runnable (the run queue's delay, /proc/PID/schedstat);
the machine's busy share over the window (/proc/stat, every core); the load average before and after.

Bounded: the fast client gives up at `--seconds` × 4 + 60 s and the run at 30 s more (the client is killed past
it); every process a run starts (the daemon, its bridges, found through /proc while it runs, the fast client and the
hogs) is stopped before the run returns. Unix sockets under a temporary directory only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from bbridge.bench import stream
from bbridge.bench.scale_bridge import STAMP, TICK_S, Streams, serve, work_items
from bbridge.bench.scale_client import Checker

ROOT = Path(__file__).resolve().parents[1]
_BOOT = "import sys; sys.path.insert(0, {root!r}); from tools.slow_client_probe import {entry}; {entry}()"
_THREAD = "~thread~"  # the thread id's place in the turn's encoded lines (no thread id holds `~`)
_DROPPED = b"stopped reading"  # the daemon's warning when it disconnects a client whose outbox is full
_TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.1  # the daemon's CPU and RSS are read this often
SHARE_S = 0.5  # the span of the busiest CPU share reported
_HOG = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass"  # bounded, and killed


def _entry(entry: str) -> list[str]:
    return [sys.executable, "-c", _BOOT.format(root=str(ROOT), entry=entry)]


# -- the fake bridge ------------------------------------------------------------------------------------------------


def turn_plan(cycles: int, cycle: int, every: bool = False) -> list[dict[str, Any]]:
    """One turn's deltas: `cycles` cycles of `cycle` deltas (reasoning, a tool call, a command's output, an answer),
    between the turn's open and its usage and boundary; each text stream's first delta holds the stamp's place (with
    `every`, each text delta)."""
    answer = max(2, cycle - 23)  # 10 reasoning + close, 3 for the tool, 8 for the command, answer + close
    plan: list[dict[str, Any]] = [{"kind": "turn.open"}]
    for c in range(cycles):
        reasoning, tool, command, message = f"r{c}", f"t{c}", f"c{c}", f"m{c}"
        plan += [
            stream.text_delta(reasoning, "reasoningText", (STAMP if i == 0 or every else "") + stream.WORDS[i % 12])
            for i in range(10)
        ]
        plan.append({"kind": "item.textClose", "key": {"providerItemId": reasoning}, "channel": "reasoningText"})
        plan += work_items(tool, command, f"src/m{c}.py", 6, lambda i: STAMP if i == 0 or every else "")
        plan += [
            stream.text_delta(message, "agentMessage", (STAMP if i == 0 or every else "") + stream.WORDS[i % 12])
            for i in range(answer)
        ]
        plan.append({"kind": "item.textClose", "key": {"providerItemId": message}, "channel": "agentMessage"})
    plan.append({"kind": "usage", "total": stream.USAGE, "last": stream.USAGE, "modelContextWindow": 200000})
    plan.append({"kind": "turn.boundary", "status": "completed"})
    return plan


class ProbeStreams(Streams):
    """The scale bridge's slots and stamping, with this probe's turn: `turn/start` text `probe CYCLES CYCLE RATE
    first|every` (which text deltas are stamped)."""

    def schedule(self, thread: str, seconds: float, rate: float) -> None:
        raise NotImplementedError("the probe's turns are scheduled with `start`")

    def start(self, thread: str, cycles: int, cycle: int, rate: float, every: bool) -> None:
        template = self.templates.get((cycles, cycle * (-1 if every else 1)))
        if template is None:
            template = self.templates[(cycles, cycle * (-1 if every else 1))] = [
                stream.notification(_THREAD, d) for d in turn_plan(cycles, cycle, every)
            ]
        start = time.monotonic() + 0.05 + random.random() * 0.1  # the turn/starts of every thread arrive first
        name = thread.encode()
        slots, marker = self.slots, _THREAD.encode()
        for n, line in enumerate(template):
            slot = max(self.next_slot, math.ceil((start + n / rate) / TICK_S))
            slots.setdefault(slot, []).append(line.replace(marker, name))


def bridge_main() -> None:
    """The fake bridge: answers the runtime's requests, streams each turn's deltas when due, one write per tick."""
    streams = ProbeStreams()

    def start(thread_id: str, words: list[str]) -> None:
        streams.start(thread_id, int(words[1]), int(words[2]), float(words[3]), words[4] == "every")

    serve(start, streams.due)


# -- the fast client ------------------------------------------------------------------------------------------------


class _Fast(Checker):
    """The scale bench's checking client, whose read gives up after a second of silence (so that a turn that never
    completes ends the run at its deadline, reported, rather than blocking it)."""

    def receive(self) -> None:
        self.sock.settimeout(1.0)
        try:
            super().receive()
        except TimeoutError:
            return


def client_main() -> None:
    """The fast client: `SOCKET TOKEN THREADS BRIDGES TIMEOUT_S TURN_TEXT`; prints `turning`, `turns`, then one JSON
    object."""
    target, token = sys.argv[1], sys.argv[2]
    threads, bridges, timeout, text = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
    deadline = time.monotonic() + timeout
    checker = _Fast(target, token, threads)
    checker.send_many([("initialize", {"client": {"name": "slow-client-probe", "version": "0"}, "token": token})])
    names = [f"probe-{n}" for n in range(threads)]
    checker.send_many(
        [("thread/start", {"providerId": f"probe{n % bridges}", "threadId": t}) for n, t in enumerate(names)]
    )
    print("turning", flush=True)
    started = time.monotonic_ns()
    turn = {"clientRequestId": "creq_probe00000", "input": [{"type": "text", "text": text}]}
    checker.send_many([("turn/start", {"threadId": t, **turn}) for t in names])
    print("turns", flush=True)
    checker.wait_completed(deadline)
    done = time.monotonic_ns()
    lost = checker.tail_lost()
    (status,) = checker.send_many([("daemon/status", {})])
    counters = checker.answers[status].result["counters"]
    print(json.dumps({"turns_started_ns": started, "done_ns": done, "lost_at_tail": lost, "counters": counters,
                      **checker.report()}), flush=True)  # fmt: skip


# -- one run --------------------------------------------------------------------------------------------------------


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _machine() -> tuple[int, int]:
    """The machine's busy and total jiffies so far, over every core (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest time is inside user)
    return total - fields[3] - fields[4], total


def _waited_s(pid: int) -> float:
    """How long the process has waited for a core while runnable (/proc/PID/schedstat: the run queue's delay)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9


def _others(daemon: int, client: int, bridges: set[int]) -> dict[str, float]:
    """The CPU seconds of the fast client and of the bridges, the seconds each part waited for a core, and the
    machine's busy and total jiffies; a process gone counts nothing."""
    got = dict.fromkeys(("client_cpu", "bridges_cpu", "daemon_wait", "client_wait", "bridges_wait"), 0.0)
    for key, pids, read in (
        ("client_cpu", {client}, _cpu_s),
        ("bridges_cpu", bridges, _cpu_s),
        ("daemon_wait", {daemon}, _waited_s),
        ("client_wait", {client}, _waited_s),
        ("bridges_wait", bridges, _waited_s),
    ):
        for pid in pids:
            with contextlib.suppress(OSError):
                got[key] += read(pid)
    got["busy"], got["total"] = _machine()
    return got


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found.update(int(p) for p in (task / "children").read_text().split())
    except OSError:
        pass
    return found


def _ms(values: list[int], share: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))] / 1e6, 1)


def _accepts(path: Path) -> bool:
    """Whether the daemon accepts connections on its socket yet."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def _expect(stream_: IO[str], word: str) -> None:
    got = stream_.readline().strip()
    if got != word:
        raise RuntimeError(f"the fast client said {got!r}, not {word!r}")


class _LogWatch(threading.Thread):
    """Reads the daemon's log as it is written: when (monotonic ns) it said it dropped a client, and its last lines."""

    def __init__(self, pipe: IO[bytes]) -> None:
        super().__init__(daemon=True)
        self.pipe = pipe
        self.dropped_ns: list[int] = []
        self.tail: list[bytes] = []

    def run(self) -> None:
        for line in self.pipe:
            if _DROPPED in line:
                self.dropped_ns.append(time.monotonic_ns())
            self.tail = [*self.tail[-19:], line]


def _stop(proc: subprocess.Popen[Any], how: signal.Signals, wait_s: float) -> None:
    if proc.poll() is None:
        proc.send_signal(how)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class Shape:
    """What one run streams: `deltas` over `threads` threads for `seconds`, through `bridges` bridges, in cycles of
    `cycle` deltas; `every` stamps every text delta (not only each stream's first); `flush_ms` is the daemon's
    `--flush-ms` (None: its default, 100 ms); `hogs` processes spin on the CPU for the run's length."""

    threads: int = 40
    deltas: int = 200_000
    seconds: float = 4.0
    bridges: int = 2
    cycle: int = 50
    every: bool = False
    flush_ms: float | None = None
    hogs: int = 0  # busy-looping processes beside the run, for a machine whose cores something else wants too

    def turn_text(self) -> str:
        """The `turn/start` text the probe's bridge reads its turn from: `probe CYCLES CYCLE RATE first|every`."""
        per_thread = self.deltas / self.threads
        cycles = max(1, round(per_thread / self.cycle))
        return f"probe {cycles} {self.cycle} {per_thread / self.seconds} {'every' if self.every else 'first'}"


def run_once(serve_python: str, stuck: bool, shape: Shape) -> dict[str, Any]:
    """One run; every process it starts is stopped before it returns."""
    threads, bridges, seconds = shape.threads, shape.bridges, shape.seconds
    timeout = seconds * 4 + 60
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bbridge-slow-") as tmp:
        root = Path(tmp)
        sock, token_file, config = root / "d.sock", root / "token", root / "bbridge.toml"
        token_file.write_text("probe-token\n")
        token_file.chmod(0o600)
        command = json.dumps(_entry("bridge_main"))
        config.write_text("".join(f"[providers.probe{n}]\ncommand = {command}\n\n" for n in range(bridges)))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the daemon imports its own tree
        argv = [serve_python, "-m", "bbridge", "serve", "--socket", str(sock), "--config", str(config)]
        argv += ["--token-file", str(token_file), "--log-level", "warning", "--log-format", "json"]
        argv += [] if shape.flush_ms is None else ["--flush-ms", str(shape.flush_ms)]
        serve = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert serve.stderr is not None
        watch = _LogWatch(serve.stderr)
        watch.start()
        spawned: set[int] = set()
        hogs = [subprocess.Popen([sys.executable, "-c", _HOG]) for _ in range(shape.hogs)]
        stuck_sock: socket.socket | None = None
        client: subprocess.Popen[str] | None = None
        try:
            deadline = time.monotonic() + 30
            while not _accepts(sock):  # the path exists from its bind, a moment before it listens
                if serve.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the daemon did not start: {b''.join(watch.tail).decode()[-2000:]}")
                time.sleep(0.02)
            if stuck:
                stuck_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                stuck_sock.connect(str(sock))
                hello = {"client": {"name": "stuck", "version": "0"}, "token": "probe-token"}
                message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
                stuck_sock.sendall(json.dumps(message).encode() + b"\n")  # and never reads again
            sizes = [str(threads), str(bridges), str(timeout), shape.turn_text()]
            client = subprocess.Popen(
                [*_entry("client_main"), str(sock), "probe-token", *sizes], stdout=subprocess.PIPE, text=True
            )
            assert client.stdout is not None
            _expect(client.stdout, "turning")
            spawned |= _children(serve.pid)
            samples = [(time.monotonic_ns(), _cpu_s(serve.pid), _status_mb(serve.pid, "VmRSS:"))]
            others = [_others(serve.pid, client.pid, spawned)] * 2  # at the turns' start, and at the last sample
            _expect(client.stdout, "turns")
            rest: list[str] = []  # its report, read as it is written (it is larger than a pipe holds)
            client_out = client.stdout
            reader = threading.Thread(target=lambda: rest.append(client_out.read()), daemon=True)
            reader.start()
            ends = time.monotonic() + timeout + 30  # the client gives up at its own timeout and reports
            while client.poll() is None and time.monotonic() < ends:
                time.sleep(SAMPLE_S)
                samples.append((time.monotonic_ns(), _cpu_s(serve.pid), _status_mb(serve.pid, "VmRSS:")))
                if client.poll() is None:
                    others[1] = _others(serve.pid, client.pid, spawned)
            if client.poll() is None:
                cpu = [round(c, 2) for _, c, _ in samples[:: max(1, round(1 / SAMPLE_S))]]
                log = b"".join(watch.tail).decode(errors="replace")[-2000:]
                raise RuntimeError(f"the fast client did not finish in time; daemon CPU each second {cpu}; log {log}")
            reader.join(timeout=10)
            report = json.loads("".join(rest).strip().splitlines()[-1])
            peak_rss = _status_mb(serve.pid, "VmHWM:")
        finally:
            spawned |= _children(serve.pid)
            if client is not None:
                _stop(client, signal.SIGKILL, 5)
            if stuck_sock is not None:
                stuck_sock.close()
            _stop(serve, signal.SIGTERM, 30)
            for hog in hogs:
                _stop(hog, signal.SIGKILL, 5)
            for pid in spawned:  # its bridges, should the daemon have left any
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            watch.join(timeout=5)
    summary = _summary(report, samples, watch.dropped_ns, peak_rss, seconds, load_before, stuck, threads)
    spent = {key: others[1][key] - others[0][key] for key in others[0]}
    for key in ("client_cpu", "bridges_cpu", "daemon_wait", "client_wait", "bridges_wait"):
        summary[f"{key}_s"] = round(spent[key], 2)
    summary["machine_busy"] = round(spent["busy"] / spent["total"], 3) if spent["total"] > 0 else 0.0
    return summary


def _summary(
    report: dict[str, Any],
    samples: list[tuple[int, float, float]],
    dropped_ns: list[int],
    peak_rss: float,
    seconds: float,
    load_before: tuple[float, float, float],
    stuck: bool,
    threads: int,
) -> dict[str, Any]:
    t0, done = report["turns_started_ns"], report["done_ns"]
    latencies, received = report["latencies_ns"], report["received_ns"]
    window_s = (done - t0) / 1e9
    inside = [s for s in samples if s[0] <= done] or samples[:1]
    cpu_s = inside[-1][1] - inside[0][1]
    span = max(1, round(SHARE_S / SAMPLE_S))
    shares = [(b[1] - a[1]) / ((b[0] - a[0]) / 1e9) for a, b in zip(inside, inside[span:], strict=False) if b[0] > a[0]]
    per_second: dict[int, list[int]] = {}
    for ns, at in zip(latencies, received, strict=True):
        per_second.setdefault(int((at - t0) // 1e9), []).append(ns)
    counters = report["counters"]
    worst = max(range(len(latencies)), key=latencies.__getitem__) if latencies else None
    return {
        "stuck": stuck,
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in os.getloadavg()],
        "samples": len(latencies),
        "p50_ms": _ms(latencies, 0.5),
        "p99_ms": _ms(latencies, 0.99),
        "max_ms": _ms(latencies, 1.0),
        "max_at_s": round((received[worst] - t0) / 1e9, 2) if worst is not None else None,
        "p99_ms_by_second": {s: _ms(v, 0.99) for s, v in sorted(per_second.items())},
        "window_s": round(window_s, 2),
        "turn_s": seconds,
        "daemon_cpu_s": round(cpu_s, 2),
        "daemon_cpu_share": round(cpu_s / window_s, 3) if window_s > 0 else 0.0,
        "daemon_busiest_share": round(max(shares), 2) if shares else 0.0,
        "daemon_peak_rss_mb": peak_rss,
        "daemon_rss_mb_by_second": {
            round((ns - t0) / 1e9): rss for ns, _, rss in samples[:: max(1, round(1 / SAMPLE_S))]
        },
        "stuck_dropped": counters["clients_disconnected_slow"],
        "stuck_dropped_at_s": [round((ns - t0) / 1e9, 2) for ns in dropped_ns],
        "deltas_in": counters["deltas_in"],
        "events": report["events"],
        "events_lost": threads - report["threads_completed"] + report["gaps"] + report["lost_at_tail"],
        "events_duplicated": report["duplicates"],
    }


# -- the command line -----------------------------------------------------------------------------------------------


def _version(python: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [python, "-m", "bbridge", "--version"]
    return subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=60).stdout.strip()


def _row(label: str, run: dict[str, Any]) -> str:
    dropped = ",".join(f"{s:g}" for s in run["stuck_dropped_at_s"]) or ("no" if run["stuck"] else "-")
    return (
        f"{label:<8} {'stuck' if run['stuck'] else 'alone':<6} {run['p50_ms']:>7.1f} {run['p99_ms']:>7.1f} "
        f"{run['max_ms']:>7.1f} {run['window_s']:>6.2f} {run['daemon_cpu_s']:>6.2f} {run['daemon_cpu_share']:>6.3f} "
        f"{run['daemon_busiest_share']:>5.2f} {run['daemon_peak_rss_mb']:>7.1f} {dropped:>8} "
        f"{run['events'] / run['window_s']:>7.0f} {run['client_cpu_s']:>5.2f} {run['bridges_cpu_s']:>5.2f} {run['daemon_wait_s']:>5.2f} {run['client_wait_s']:>5.2f} {run['bridges_wait_s']:>5.2f} "
        f"{run['machine_busy']:>5.2f} {run['load_before'][0]:>5.2f} {run['events_lost']:>4}"
    )


HEADER = (
    f"{'daemon':<8} {'client':<6} {'p50ms':>7} {'p99ms':>7} {'maxms':>7} {'win_s':>6} {'cpu_s':>6} {'share':>6} "
    f"{'busy':>5} {'rss_mb':>7} {'dropped':>8} {'ev/s':>7} {'cli_s':>5} {'brg_s':>5} {'d_wq':>5} {'c_wq':>5} {'b_wq':>5} {'mach':>5} {'load1':>5} "
    f"{'lost':>4}"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--daemon",
        action="append",
        metavar="LABEL=PYTHON",
        help="a daemon to measure: the interpreter whose `bbridge` runs it (repeatable; default: now=this one)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every daemon, stuck then alone")
    parser.add_argument("--only", choices=("stuck", "alone"), help="run only with, or only without, the stuck client")
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--deltas", type=int, default=200_000, help="deltas in all, over every thread")
    parser.add_argument("--seconds", type=float, default=4.0, help="how long each turn streams")
    parser.add_argument("--bridges", type=int, default=2)
    parser.add_argument("--cycle", type=int, default=50, help="deltas in one cycle of a turn's items (>= 26)")
    parser.add_argument("--every", action="store_true", help="stamp every text delta, not only each stream's first")
    parser.add_argument("--flush-ms", type=float, help="the daemon's text coalescing window (default: its own, 100)")
    parser.add_argument("--hogs", type=int, default=0, help="processes spinning on the CPU during each run")
    parser.add_argument("--out", type=Path, help="append each run's JSON object to this file too")
    args = parser.parse_args()
    daemons = [tuple(d.split("=", 1)) for d in args.daemon or [f"now={sys.executable}"]]
    modes = [m == "stuck" for m in ("stuck", "alone") if args.only in (None, m)]
    for label, python in daemons:
        print(f"{label}: {python}: {_version(python).splitlines()[-1]}", file=sys.stderr)
    shape = Shape(
        args.threads, args.deltas, args.seconds, args.bridges, args.cycle, args.every, args.flush_ms, args.hogs
    )
    rows: list[str] = []
    for round_ in range(args.rounds):
        for label, python in daemons:
            for stuck in modes:
                run = run_once(python, stuck, shape)
                run = {"daemon": label, "python": python, "round": round_ + 1, "shape": asdict(shape), **run}
                line = json.dumps(run)
                print(line, flush=True)
                if args.out is not None:
                    with args.out.open("a", encoding="utf-8") as f:
                        f.write(line + "\n")
                rows.append(_row(label, run))
                print(rows[-1], file=sys.stderr, flush=True)
    print("\n".join([HEADER, *rows]), file=sys.stderr)


if __name__ == "__main__":
    main()
