"""The daemon's resource soak (issue 49, item 5): a daemon kept busy for a long while, its RSS, open file
descriptors and child processes sampled, their slopes reported, and nothing left after its shutdown.

    python -m tools.soak_daemon                          # 30 minutes (`make soak-daemon`)
    SOAK_DAEMON_S=120 python -m tools.soak_daemon        # a short local run (or --seconds 120)

What runs: `bbridge serve --socket S --listen 127.0.0.1:PORT --token-file T --journal DIR --journal-bound 256`
(`--no-journal`: without `--journal`, everything in memory) in a temporary directory, on a `bbridge.toml` of two
providers on the echo bridge (`python -m bridges.echo`: restorable sessions, a `tool:<name>` directive that calls a
tool), each idle-reaped (`idle_release_s`, issue 49 item 4), one of them also stopped when idle
(`bridge_idle_exit_s`) and started with the daemon (`prestart`), and one hosted command tool
(`[tools.soak_stamp]`, `echo`, policy allow). Against it, at a modest pace (the machine may be shared):

* a pool of `--threads` thread ids on the first provider: each step picks one; a fresh one (or one in four) is
  constructed (`thread/start`, a new session; every `--mcp-every`-th construction brings its own MCP server,
  tests/mcp_server.py, so a release stops it and the resume starts it again), then gets a turn, every other turn a
  call of the hosted tool. A thread idle past `--idle-release-s` is released by the daemon, and the next turn on it
  resumes it first, so most turns land on a released thread;
* a thread on the second provider every `--burst-s`: its bridge serves it, releases it and then, idle, stops; the
  next one starts it again;
* WebSocket clients on the listener, one every `--ws-s`, in turn: one that connects, reads `daemon/status` and
  closes; one that stays a few seconds taking every broadcast, then closes; one that completes the upgrade and drops
  its TCP connection without a close frame;
* budgets tripping (`budgets_hook`, when the configuration knows `[[budgets]]`): a turn every `--budget-s` on a pool
  of four threads under a `deny` budget of one token per thread, so each thread's first turn spends and every later
  one is refused naming the budget.

Every `--sample-s` (10 s) the daemon's RSS (VmRSS), its open descriptors (/proc/PID/fd) and its descendant processes
(from every /proc/*/stat's parent) are sampled, with its CPU time and the counters of `daemon/status`. The report
gives each series' least-squares slope over the last `--window-s` (20 minutes; the whole run after the first
sample when shorter), projected over that window. The RSS is flat when that projection grows by less than `FLAT`
(4 MiB; one that falls leaks nothing). Descriptors and processes count what is in flight at a sample too (a turn's
tool process, an MCP server, a WebSocket, the journal files of the threads at work), which comes and goes, so their
slope is that of their floor (the fewest within a minute around each sample, `floor`), and they are judged by their
base level: the fewest over the window's first quarter against the fewest over its last (`rise`), flat when it rises
by fewer than 2 descriptors and 1 process. A leak raises every later sample, the base with them.

What the memory that grew is made of: the daemon runs through a bootstrap (`BOOT`) that, on SIGUSR1, appends a
census of its heap (after a full collection: `sys.getallocatedblocks()`, the count of every type the collector
tracks and of every dict shape, its first keys, and its RSS) to a file; the soak takes one as the window starts and
one at the end and reports the blocks and the types that grew, per turn too (`census`); after the last one the
daemon's C library gives back the free memory it holds (`malloc_trim(0)`) and the RSS is read again
(`rssKiBAfterTrim`): RSS that grew while no object did is memory the allocator kept, not the daemon. Each census is
taken in a forked child, so it does not move the daemon's RSS. At the end the daemon gets SIGTERM; then no process
it started may be alive (every descendant seen in a sample, and any process whose working directory is the soak's
directory), its socket file must be gone and its port closed.

The last line on stdout is the report as one JSON object (`--out FILE` writes it too); a summary goes to stderr. Exit
1 when a turn or a request failed, something is left after the shutdown, or (`--strict`, as `make soak-daemon` runs
it) a slope is not flat.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import trio

from bbridge.client import Client, DaemonError, Disconnected
from bbridge.daemon.config import KNOWN_SECTIONS
from bbridge.wire import errors

REPO = Path(__file__).resolve().parent.parent
MCP_SERVER = REPO / "tests" / "mcp_server.py"
FULL = {"permissionMode": "full", "permissionScope": "full", "approvalReviewer": None, "permissionEscalation": None}
FLAT = {"rssKiB": 4096.0, "fds": 2.0, "children": 1.0}  # the most each may grow over the window to be flat
# The daemon is `bbridge serve` run through this bootstrap: on SIGUSR1 it appends a census of its heap to the file
# `SOAK_CENSUS` names (a full collection first; `sys.getallocatedblocks()`, the count of each type the collector
# tracks and of each dict shape, its first keys, and its RSS), which the soak takes at the window's start and at the
# end, to say what the memory that grew is made of. The census is taken in a forked child, which sees the daemon's
# heap as it is and whose allocations are its own, so measuring does not move the daemon's RSS (the daemon waits the
# second or so it takes). The last one (SIGUSR2) first asks the C library to give back the free memory it holds
# (glibc's `malloc_trim(0)`) and reads the RSS again: what RSS grew that no object holds. With `--tracemalloc N`
# the daemon traces its allocations (N frames each) and each census dumps a snapshot, compared at the end by line:
# where the memory that grew was allocated, objects the collector does not track (strings) and growing sizes too.
BOOT = """
import collections, ctypes, ctypes.util, gc, json, os, runpy, signal, sys, tracemalloc
if os.environ.get("SOAK_TRACEMALLOC"):
    tracemalloc.start(int(os.environ["SOAK_TRACEMALLOC"]))
def rss_kib():
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
def where():
    # Where the daemon's memory lives, read in the fork before it allocates: pymalloc's arenas (their bytes, the
    # bytes of live blocks in them), glibc's heap (in use, free, mapped), the threads (each has its own stack)
    with open(os.environ["SOAK_CENSUS"] + ".stats", "w+", encoding="ascii") as stats:
        os.dup2(stats.fileno(), 2)
        sys._debugmallocstats()
        stats.seek(0)
        text = stats.read()
    def number(label):
        found = [line for line in text.splitlines() if line.startswith(label)]
        return int(found[0].rsplit("=", 1)[1].replace(",", "")) if found else None
    where = {"arenas": number("# arenas allocated current"), "blocksBytes": number("# bytes in allocated blocks"),
             "freeBlocksBytes": number("# bytes in available blocks"),
             "threads": len(os.listdir(f"/proc/{os.getppid()}/task"))}
    libc = ctypes.util.find_library("c")
    if libc and hasattr(ctypes.CDLL(libc), "mallinfo2"):
        mallinfo2 = ctypes.CDLL(libc).mallinfo2
        mallinfo2.restype = Mallinfo2
        info = mallinfo2()
        where.update(heapBytes=info.arena, mappedBytes=info.hblkhd, inUseBytes=info.uordblks, freeBytes=info.fordblks)
    return where
def census(signum, frame):
    taken = {"rssKiB": rss_kib()}
    if signum == signal.SIGUSR2 and ctypes.util.find_library("c"):
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
        taken["rssKiBTrimmed"] = rss_kib()
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    try:
        taken["memory"] = where()
        gc.collect()
        held = gc.get_objects()
        taken["types"] = collections.Counter(type(o).__qualname__ for o in held)
        taken["dicts"] = collections.Counter(",".join(sorted(map(str, o))[:6]) for o in held if type(o) is dict)
        taken["blocks"] = sys.getallocatedblocks()
        if tracemalloc.is_tracing():
            taken["snapshot"] = f"{os.environ['SOAK_CENSUS']}.{os.getpid()}.snapshot"
            tracemalloc.take_snapshot().dump(taken["snapshot"])
        with open(os.environ["SOAK_CENSUS"], "a", encoding="utf-8") as out:
            out.write(json.dumps(taken) + "\\n")
    finally:
        os._exit(0)
signal.signal(signal.SIGUSR1, census)
signal.signal(signal.SIGUSR2, census)
sys.argv = ["bbridge", *sys.argv[1:]]
runpy.run_module("bbridge", run_name="__main__", alter_sys=True)
"""
CENSUS_TOP = 12
BUDGET = "soak-tiny"  # the budget `budgets_hook` configures
TURN_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


@dataclass
class Sample:
    t: float  # seconds since the daemon started
    rss_kib: int
    fds: int
    children: int
    cpu_s: float
    threads: int  # rows in daemon/status
    counters: dict[str, int]


@dataclass
class Tally:
    constructions: int = 0
    turns: int = 0
    tool_turns: int = 0
    burst_threads: int = 0
    ws_status: int = 0
    ws_listeners: int = 0
    ws_drops: int = 0
    budget_turns: int = 0
    budget_trips: int = 0
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        if len(self.failures) < 50:
            self.failures.append(what)


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.soak_daemon", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=env_float("SOAK_DAEMON_S", 1800), help="how long (SOAK_DAEMON_S)"
    )
    parser.add_argument("--sample-s", type=float, default=env_float("SOAK_DAEMON_SAMPLE_S", 10), help="sampling period")
    parser.add_argument("--window-s", type=float, default=1200, help="the slopes' window: the run's last seconds")
    parser.add_argument("--threads", type=int, default=24, help="thread ids in the pool")
    parser.add_argument("--pace-s", type=float, default=0.5, help="between two thread steps")
    parser.add_argument("--idle-release-s", type=float, default=2.0, help="idle_release_s of both providers")
    parser.add_argument("--bridge-idle-exit-s", type=float, default=3.0, help="bridge_idle_exit_s of the second")
    parser.add_argument("--burst-s", type=float, default=10.0, help="between two threads on the second provider")
    parser.add_argument("--ws-s", type=float, default=3.0, help="between two WebSocket clients")
    parser.add_argument("--budget-s", type=float, default=15.0, help="between two turns under the tripping budget")
    parser.add_argument(
        "--mcp-every", type=int, default=4, help="every Nth construction brings an MCP server (0: none)"
    )
    parser.add_argument("--seed", type=int, default=49)
    parser.add_argument(
        "--tracemalloc", type=int, default=0, metavar="FRAMES",
        help="trace the daemon's allocations (FRAMES each) and compare the censuses by line (a diagnosis: it costs)",
    )  # fmt: skip
    parser.add_argument(
        "--journal", action=argparse.BooleanOptionalAction, default=True,
        help="serve with --journal in the soak's directory (--no-journal: everything in memory)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="write the report here too")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a slope is not flat")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (the daemon's log)")
    return parser.parse_args(argv)


# -- the daemon's configuration ---------------------------------------------------------------------------------------


def budgets_hook() -> str:
    """`[[budgets]]` for the soak when this tree's configuration has the section (issue 49 item 2): a `deny` budget
    of one token per thread on the `soak-budget-*` threads `budget_worker` runs turns on (each thread's first turn
    spends, every later one trips it). Without the section, nothing: the report says budgets are not on this tree."""
    if "budgets" not in KNOWN_SECTIONS:
        return ""
    return (
        f'\n[[budgets]]\nname = "{BUDGET}"\nscope = "thread"\nmatch = "soak-budget-*"\nwindow = "thread"\n'
        'tokens = 1\naction = "deny"\n'
    )


def configuration(work: Path, args: argparse.Namespace) -> str:
    echo = json.dumps([sys.executable, "-m", "bridges.echo"])
    env = json.dumps(str(REPO))
    stamp = json.dumps(["echo", "stamped", "{text}"])
    return f"""
[providers.soak]
command = {echo}
cwd = {json.dumps(str(work))}
env = {{ PYTHONPATH = {env} }}
idle_release_s = {args.idle_release_s}

[providers.burst]
command = {echo}
cwd = {json.dumps(str(work))}
env = {{ PYTHONPATH = {env} }}
idle_release_s = {args.idle_release_s}
bridge_idle_exit_s = {args.bridge_idle_exit_s}
prestart = true

[tools.soak_stamp]
description = "Stamp a text"
schema = {{ type = "object", properties = {{ text = {{ type = "string" }} }}, required = ["text"] }}
command = {stamp}
policy = "allow"
env = ["PATH"]
""" + budgets_hook()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# -- /proc ------------------------------------------------------------------------------------------------------------


def parents() -> dict[int, tuple[int, str, int]]:
    """Every live process: pid → (parent pid, state, start time in clock ticks)."""
    found: dict[int, tuple[int, str, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            found[int(entry)] = (int(fields[1]), fields[0], int(fields[19]))
    return found


def descendants(root: int, table: dict[int, tuple[int, str, int]]) -> dict[int, int]:
    """The live (not zombie) descendants of `root`: pid → start time."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, int] = {}
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        ppid, state, start = table[pid]
        if state != "Z":
            out[pid] = start
        stack.extend(children.get(pid, []))
    return out


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def under(work: Path) -> dict[int, str]:
    """Live processes (not this one) whose working directory is `work` or below it: pid → command line."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError, IndexError):
            cwd = os.readlink(f"/proc/{entry}/cwd")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and (cwd == str(work) or cwd.startswith(f"{work}/")):
                found[int(entry)] = (
                    Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
    return found


# -- the slopes -------------------------------------------------------------------------------------------------------


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t, y), per second (0 with fewer than two distinct times)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mean_t) * (y - mean_y) for t, y in points) / var


def floor(points: list[tuple[float, float]], width_s: float = 60.0) -> list[tuple[float, float]]:
    """(t, y) with each y the fewest within `width_s` around it: the level under what comes and goes."""
    return [(t, min(v for u, v in points if abs(u - t) <= width_s / 2)) for t, _ in points]


def trend(samples: list[Sample], window_s: float) -> dict[str, Any]:
    """Each series over the window: its slope per hour (RSS: of every sample; descriptors and processes: of their
    `floor`), its change projected over the window, first, last, min, max, and whether it is flat: it grows by less
    than `FLAT` over the window (falling is no leak: fewer threads at work at the end hold fewer descriptors)."""
    if not samples:
        return {}
    end = samples[-1].t
    chosen = [s for s in samples if s.t >= end - window_s] or samples
    if chosen[0] is samples[0] and len(samples) > 2:
        chosen = chosen[1:]  # the first sample is the start-up's, before the load
    span = chosen[-1].t - chosen[0].t
    out: dict[str, Any] = {"windowS": round(span, 1), "samples": len(chosen)}
    for name, attribute in (("rssKiB", "rss_kib"), ("fds", "fds"), ("children", "children")):
        values = [float(getattr(s, attribute)) for s in chosen]
        points = [(s.t, v) for s, v in zip(chosen, values, strict=True)]
        per_s = slope(points if name == "rssKiB" else floor(points))
        projected = per_s * span
        out[name] = {
            "slopePerHour": round(per_s * 3600, 3),
            "overWindow": round(projected, 3),
            "first": values[0],
            "last": values[-1],
            "min": min(values),
            "max": max(values),
            "mean": round(sum(values) / len(values), 3),
        }
        if name == "rssKiB":
            out[name]["flat"] = projected < FLAT[name]  # what a leak fails: growth (falling leaks nothing)
        else:  # the base level: the fewest over the window's first quarter, and over its last
            start, end = chosen[0].t + span / 4, chosen[-1].t - span / 4
            base = [min(v for t, v in points if t <= start), min(v for t, v in points if t >= end)]
            out[name].update(base=base, rise=base[1] - base[0], flat=base[1] - base[0] < FLAT[name])
    if span > 0:
        out["daemonCpuShare"] = round((chosen[-1].cpu_s - chosen[0].cpu_s) / span, 4)  # of one core
    return out


# -- the load ---------------------------------------------------------------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace, work: Path, socket_path: Path, port: int, token: str) -> None:
        self.args = args
        self.work = work
        self.socket = socket_path
        self.url = f"ws://127.0.0.1:{port}"
        self.port = port
        self.token = token
        self.tally = Tally()
        self.random = random.Random(args.seed)
        self.completed: Counter[str] = Counter()  # turn/completed events per thread
        self.turn_status: dict[str, str] = {}  # each thread's last completed turn's status
        self.changed = trio.Event()

    async def follow(self, client: Client) -> None:
        """Every thread's events on the main connection: completed turns counted."""
        async for notice in client.notifications():
            if notice.method != "thread/events":
                continue
            thread_id = notice.raw.get("threadId")
            for entry in notice.raw.get("events") or []:
                event = entry.get("event") or {}
                if event.get("type") == "turn/completed" and isinstance(thread_id, str):
                    self.completed[thread_id] += 1
                    self.turn_status[thread_id] = str(event.get("status"))
            self.changed.set()
            self.changed = trio.Event()

    async def turn(self, client: Client, thread_id: str, text: str, refusal: str | None = None) -> str | None:
        """One turn, waited for to its end: "completed", "refused" (a budget named `refusal` refused it), or None
        (a failure, tallied)."""
        before = self.completed[thread_id]
        params = {"threadId": thread_id, "input": [{"type": "text", "text": text}], "options": FULL}
        try:
            await client.request("turn/start", params)
        except DaemonError as exc:
            if refusal is not None and exc.code == errors.BUDGET_EXCEEDED and refusal in exc.message:
                return "refused"
            self.tally.fail(f"turn/start {thread_id}: {exc}")
            return None
        with trio.move_on_after(TURN_TIMEOUT_S) as waited:
            while self.completed[thread_id] <= before:
                await self.changed.wait()
        if waited.cancelled_caught:
            self.tally.fail(f"turn on {thread_id} did not complete within {TURN_TIMEOUT_S:g}s")
            return None
        if self.turn_status.get(thread_id) != "completed":
            self.tally.fail(f"turn on {thread_id} ended {self.turn_status.get(thread_id)}")
            return None
        self.tally.turns += 1
        return "completed"

    def construction(self, provider: str, thread_id: str, servers: bool) -> dict[str, Any]:
        options: dict[str, Any] = dict(FULL)
        if servers:
            options["tools"] = {"mcpServers": [{"name": "soak", "command": [sys.executable, str(MCP_SERVER)]}]}
        return {"providerId": provider, "threadId": thread_id, "cwd": str(self.work), "options": options}

    async def thread_worker(self, client: Client, until: float) -> None:
        """Threads of the pool constructed, used and (by the daemon) released and resumed."""
        started: set[str] = set()
        step = 0
        while trio.current_time() < until:
            step += 1
            thread_id = f"soak-{self.random.randrange(self.args.threads)}"
            if thread_id not in started or self.random.random() < 0.25:
                self.tally.constructions += 1
                every = self.args.mcp_every
                servers = every > 0 and self.tally.constructions % every == 0
                try:
                    await client.request("thread/start", self.construction("soak", thread_id, servers))
                    started.add(thread_id)
                except DaemonError as exc:
                    self.tally.fail(f"thread/start {thread_id}: {exc}")
            if thread_id in started:
                if step % 2:
                    text = f'tool:soak_stamp args:{{"text":"n{step}"}}'
                    if await self.turn(client, thread_id, text) == "completed":
                        self.tally.tool_turns += 1
                else:
                    await self.turn(client, thread_id, f"soak step {step}")
            await trio.sleep(self.args.pace_s)

    async def burst_worker(self, client: Client, until: float) -> None:
        """A thread on the provider whose bridge stops when idle: each starts it again."""
        n = 0
        while trio.current_time() < until:
            n += 1
            thread_id = f"burst-{n % 4}"
            try:
                await client.request("thread/start", self.construction("burst", thread_id, False))
                await self.turn(client, thread_id, f"burst {n}")
                self.tally.burst_threads += 1
            except DaemonError as exc:
                self.tally.fail(f"burst {thread_id}: {exc}")
            await trio.sleep(self.args.burst_s)

    async def budget_worker(self, client: Client, until: float) -> None:
        """Budgets tripping (`budgets_hook`): a turn every `--budget-s` on a pool of four threads under a `deny`
        budget of one token per thread: a thread's first turn spends (its usage is booked), every later one is
        refused, naming the budget."""
        n = 0
        while trio.current_time() < until:
            n += 1
            thread_id = f"soak-budget-{n % 4}"
            try:
                await client.request("thread/start", self.construction("soak", thread_id, False))
            except DaemonError as exc:
                self.tally.fail(f"budget thread/start {thread_id}: {exc}")
            outcome = await self.turn(client, thread_id, "spend", refusal=BUDGET)
            if outcome == "refused":
                self.tally.budget_trips += 1
            elif outcome == "completed":
                self.tally.budget_turns += 1
            await trio.sleep(self.args.budget_s)

    async def ws_worker(self, until: float) -> None:
        """WebSocket clients connecting and dropping, three kinds in turn."""
        n = 0
        while trio.current_time() < until:
            n += 1
            try:
                if n % 3 == 0:
                    await self.ws_drop()
                    self.tally.ws_drops += 1
                else:
                    async with Client.connect(self.url, token=self.token) as ws:
                        await ws.status()
                        if n % 3 == 2:
                            with trio.move_on_after(min(5.0, self.args.ws_s)):
                                async for _ in ws.notifications():
                                    pass
                            self.tally.ws_listeners += 1
                        else:
                            self.tally.ws_status += 1
            except (OSError, DaemonError, Disconnected) as exc:
                self.tally.fail(f"websocket client {n}: {exc!r}")
            await trio.sleep(self.args.ws_s)

    async def ws_drop(self) -> None:
        """An upgrade completed, then the TCP connection dropped with no close frame."""
        stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        key = secrets.token_bytes(16).hex()[:22] + "=="
        request = (
            f"GET /rpc HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {self.token}\r\n\r\n"
        )
        try:
            await stream.send_all(request.encode())
            with trio.move_on_after(5):
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    head += chunk
            if not head.startswith(b"HTTP/1.1 101"):
                raise OSError(f"the upgrade was answered {head[:40]!r}")
        finally:
            await stream.aclose()


async def sample(pid: int, client: Client, born: float, seen: dict[int, int]) -> Sample:
    table = parents()
    children = descendants(pid, table)
    seen.update(children)
    raw = await client.request("daemon/status", {"includeHidden": True})
    counters = {k: v for k, v in (raw.get("counters") or {}).items() if isinstance(v, int)}
    return Sample(
        round(time.monotonic() - born, 3),
        rss_kib(pid),
        len(os.listdir(f"/proc/{pid}/fd")),
        len(children),
        round(cpu_s(pid), 3),
        len(raw.get("threads") or []),
        counters,
    )


async def take_census(pid: int, path: Path, turns: int, t: float, trim: bool = False) -> dict[str, Any] | None:
    """The daemon's census (`BOOT`), asked with SIGUSR1 (`trim`: SIGUSR2, the free memory given back before it) and
    read back (None: none came within 10 s)."""
    before = path.read_text(encoding="utf-8").count("\n") if path.exists() else 0
    os.kill(pid, signal.SIGUSR2 if trim else signal.SIGUSR1)
    with trio.move_on_after(10):
        while not path.exists() or path.read_text(encoding="utf-8").count("\n") <= before:
            await trio.sleep(0.05)
        taken: dict[str, Any] = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
        return {"t": t, "turns": turns, **taken}
    return None


def census_diff(first: dict[str, Any] | None, last: dict[str, Any] | None) -> dict[str, Any]:
    """What grew between two censuses: allocated blocks, and the types whose count grew most (per turn too)."""
    if first is None or last is None:
        return {"taken": False}
    turns = max(1, last["turns"] - first["turns"])
    grown = Counter(last["types"])
    grown.subtract(first["types"])
    return {
        "fromS": first["t"],
        "toS": last["t"],
        "turns": last["turns"] - first["turns"],
        "allocatedBlocks": [first["blocks"], last["blocks"]],
        "blocksPerTurn": round((last["blocks"] - first["blocks"]) / turns, 2),
        "grownTypes": [[name, n, last["types"].get(name, 0)] for name, n in grown.most_common(CENSUS_TOP) if n > 0],
        "shrunkTypes": [[name, n] for name, n in sorted(grown.items(), key=lambda kv: kv[1])[:5] if n < 0],
        "grownDicts": _grown(first.get("dicts", {}), last.get("dicts", {})),
        "rssKiB": [first.get("rssKiB"), last.get("rssKiB")],
        "allocatedAt": _allocated_at(first.get("snapshot"), last.get("snapshot")),
        "rssKiBAfterTrim": last.get("rssKiBTrimmed"),  # the end's RSS once the C library gave back its free memory
        "memory": {key: [first.get("memory", {}).get(key), value] for key, value in last.get("memory", {}).items()},
    }


def _allocated_at(first: str | None, last: str | None) -> list[list[Any]]:
    """With `--tracemalloc`: the lines whose allocations grew most between the two snapshots (KiB, blocks)."""
    if first is None or last is None:
        return []
    import tracemalloc  # only for this comparison: the soak itself traces nothing

    grown = tracemalloc.Snapshot.load(last).compare_to(tracemalloc.Snapshot.load(first), "lineno")
    top = sorted(grown, key=lambda stat: stat.size_diff, reverse=True)[:CENSUS_TOP]
    return [[str(stat.traceback), round(stat.size_diff / 1024, 1), stat.count_diff] for stat in top]


def _grown(first: dict[str, int], last: dict[str, int]) -> list[list[Any]]:
    """The dict shapes (their first keys, sorted) whose count grew most: what kind of record the growth is."""
    grown = Counter(last)
    grown.subtract(first)
    return [[shape, n, last.get(shape, 0)] for shape, n in grown.most_common(CENSUS_TOP) if n > 0]


async def drive(
    args: argparse.Namespace, soak: Soak, pid: int, born: float, census_path: Path
) -> tuple[list[Sample], dict[int, int], dict[str, Any]]:
    samples: list[Sample] = []
    seen: dict[int, int] = {}
    first: dict[str, Any] | None = None
    async with Client.connect(soak.socket, token=soak.token) as client:
        start = trio.current_time()
        until = start + args.seconds
        window_from = max(start + args.sample_s, until - args.window_s)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(soak.follow, client)
            async with trio.open_nursery() as load:
                load.start_soon(soak.thread_worker, client, until)
                load.start_soon(soak.burst_worker, client, until)
                load.start_soon(soak.ws_worker, until)
                if budgets_hook():
                    load.start_soon(soak.budget_worker, client, until)
                while True:
                    samples.append(await sample(pid, client, born, seen))
                    last = samples[-1]
                    print(
                        f"soak t={last.t:7.1f}s rss={last.rss_kib / 1024:6.1f} MiB fds={last.fds:3d} "
                        f"children={last.children:2d} threads={last.threads} turns={soak.tally.turns} "
                        f"released={last.counters.get('idle_releases', 0)} resumed={last.counters.get('idle_resumes', 0)} "
                        f"bridges stopped={last.counters.get('idle_bridge_stops', 0)}",
                        file=sys.stderr,
                        flush=True,
                    )
                    if first is None and trio.current_time() >= window_from:
                        first = await take_census(pid, census_path, soak.tally.turns, last.t)
                    if trio.current_time() >= until:
                        break
                    await trio.sleep(min(args.sample_s, max(0.0, until - trio.current_time())))
            last_census = await take_census(pid, census_path, soak.tally.turns, samples[-1].t, trim=True)
            nursery.cancel_scope.cancel()
    return samples, seen, census_diff(first, last_census)


def stop_daemon(daemon: subprocess.Popen[bytes]) -> int | None:
    daemon.send_signal(signal.SIGTERM)
    try:
        return daemon.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
        return None


def alive(seen: dict[int, int]) -> list[int]:
    """The pids of `seen` still alive as the same process (same start time, not a zombie)."""
    table = parents()
    return sorted(
        pid for pid, start in seen.items() if pid in table and table[pid][2] == start and table[pid][1] != "Z"
    )


def port_closed(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@contextlib.contextmanager
def workdir(keep: bool) -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="bbridge-soak-"))
    try:
        yield work
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with workdir(args.keep) as work:
        config, token_file, socket_path = work / "bbridge.toml", work / "token", work / "bbridge.sock"
        config.write_text(configuration(work, args), encoding="utf-8")
        token = secrets.token_urlsafe(24)
        token_file.write_text(token + "\n", encoding="utf-8")
        token_file.chmod(0o600)
        port = free_port()
        argv = [
            sys.executable, "-c", BOOT, "serve", "--socket", str(socket_path), "--listen", f"127.0.0.1:{port}",
            "--token-file", str(token_file), "--config", str(config), "--journal-bound", "256",
            *(["--journal", str(work / "journal")] if args.journal else []),
            "--allow-client-mcp-servers", "--log-format", "json", "--log-level", "warning",
        ]  # fmt: skip
        census_path = work / "census.ndjson"
        env = {**os.environ, "PYTHONPATH": str(REPO), "SOAK_CENSUS": str(census_path)}
        if args.tracemalloc:
            env["SOAK_TRACEMALLOC"] = str(args.tracemalloc)
        with (work / "daemon.log").open("wb") as log:
            born = time.monotonic()
            daemon = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            soak = Soak(args, work, socket_path, port, token)
            samples: list[Sample] = []
            seen: dict[int, int] = {}
            census: dict[str, Any] = {"taken": False}
            try:
                deadline = time.monotonic() + 30
                while not socket_path.exists() and time.monotonic() < deadline and daemon.poll() is None:
                    time.sleep(0.05)
                samples, seen, census = trio.run(drive, args, soak, daemon.pid, born, census_path)
            except Exception as exc:  # the daemon is stopped and the failure reported either way
                soak.tally.fail(f"the soak's driver failed: {exc!r}")
            finally:
                code = stop_daemon(daemon)
        time.sleep(0.5)  # what the daemon's group had to do after its exit (a SIGTERMed tool's parent reaping it)
        left = alive(seen)
        stray = under(work)
        said = (work / "daemon.log").read_text(encoding="utf-8", errors="replace").splitlines()
        levels = Counter(json.loads(line).get("level", "?") for line in said if line.startswith("{"))
        report: dict[str, Any] = {
            "seconds": args.seconds,
            "sampleS": args.sample_s,
            "daemonExit": code,
            "trend": trend(samples, args.window_s),
            "census": census,
            "tally": asdict(soak.tally),
            "counters": samples[-1].counters if samples else {},
            "budgets": "exercised" if budgets_hook() else "not on this tree (no [[budgets]] section): budgets_hook",
            "afterShutdown": {
                "descendantsSeen": len(seen),
                "descendantsAlive": left,
                "processesInWorkDir": stray,
                "socketFileGone": not socket_path.exists(),
                "portClosed": port_closed(port),
            },
            "daemonLog": dict(levels),
            "machine": {"cpus": os.cpu_count(), "loadAverageAtEnd": os.getloadavg()},
            "samples": [asdict(s) for s in samples],
        }
        if args.keep:
            report["workDir"] = str(work)
        return report


def verdict(report: dict[str, Any], strict: bool) -> list[str]:
    """What makes the run fail."""
    problems = list(report["tally"]["failures"])
    after = report["afterShutdown"]
    if report["daemonExit"] != 0:
        problems.append(f"the daemon exited {report['daemonExit']} (None: killed after {STOP_TIMEOUT_S:g}s)")
    if after["descendantsAlive"] or after["processesInWorkDir"]:
        problems.append(f"left after shutdown: {after['descendantsAlive']} {after['processesInWorkDir']}")
    if not after["socketFileGone"] or not after["portClosed"]:
        problems.append("the daemon's socket file or port outlived it")
    if strict:
        for name in FLAT:
            series = report["trend"].get(name)
            if series is not None and not series["flat"]:
                grew = series.get("rise", series["overWindow"])
                problems.append(f"{name} not flat: {grew} more over the window")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    report = run(args)
    problems = verdict(report, args.strict)
    report["problems"] = problems
    line = json.dumps(report)
    if args.out is not None:
        args.out.write_text(line + "\n", encoding="utf-8")
    trend_ = report["trend"]
    for name in FLAT:
        if name in trend_:
            series = trend_[name]
            print(
                f"soak {name}: slope {series['slopePerHour']}/h, {series['overWindow']} over "
                f"{trend_['windowS']}s ({'flat' if series['flat'] else 'NOT flat'}); first {series['first']} last "
                f"{series['last']} min {series['min']} max {series['max']}",
                file=sys.stderr,
            )
    print(f"soak census: {json.dumps(report['census'])}", file=sys.stderr)
    print(f"soak tally: {json.dumps(report['tally'])}", file=sys.stderr)
    print(f"soak after shutdown: {json.dumps(report['afterShutdown'])}", file=sys.stderr)
    for problem in problems:
        print(f"soak problem: {problem}", file=sys.stderr)
    print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
