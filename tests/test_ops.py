"""`bbridge status` and `bbridge tail` against a daemon running on a socket (the echo provider), as subprocesses."""

from __future__ import annotations

import io
import json
import math
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import trio
import trio.testing

from bbridge import ops
from bbridge.client import Notice
from bbridge.daemon.config import echo_provider
from bbridge.ops import Tail, format_status
from bbridge.wire.client_api import ThreadEventsResult, ThreadPendingResult
from tests.support import FULL, TestClient, connect, running

BBRIDGE = [sys.executable, "-m", "bbridge"]


async def bbridge(*args: str) -> subprocess.CompletedProcess[bytes]:
    """A bbridge command run to its end without blocking the daemon, which runs in this test's event loop."""
    with trio.fail_after(30):
        return await trio.run_process([*BBRIDGE, *args], capture_stdout=True, capture_stderr=True, check=False)


async def turn(client: TestClient, thread_id: str, prompt: str) -> None:
    """One echo turn on `thread_id` (started when new), waited for until it completes."""
    if thread_id not in client.entries:
        await client.request(
            "thread/start", {"providerId": "echo", "threadId": thread_id, "cwd": "/tmp", "options": FULL}
        )
    done = client.types(thread_id).count("turn/completed") + 1
    params = {"providerId": "echo", "threadId": thread_id, "clientRequestId": "creq_abcdefghjk", "options": FULL}
    await client.request("turn/start", {**params, "input": [{"type": "text", "text": prompt, "mentions": []}]})
    await client.wait_for(lambda: client.types(thread_id).count("turn/completed") == done)


class Tailing:
    """A `bbridge tail` child whose stdout is read line by line, each wait bounded."""

    def __init__(self, proc: trio.Process) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.stdout = proc.stdout
        self.lines: list[str] = []
        self._buffer = b""

    async def until(self, predicate: Callable[[list[str]], bool], timeout: float = 20) -> None:
        with trio.fail_after(timeout):
            while not predicate(self.lines):
                chunk = await self.stdout.receive_some()
                assert chunk, f"bbridge tail ended early; it printed {self.lines}"
                self._buffer += chunk
                *complete, self._buffer = self._buffer.split(b"\n")
                self.lines.extend(line.decode() for line in complete)


@asynccontextmanager
async def tailing(*args: str) -> AsyncIterator[Tailing]:
    proc = await trio.lowlevel.open_process([*BBRIDGE, "tail", *args], stdout=subprocess.PIPE)
    try:
        yield Tailing(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
        with trio.fail_after(10):
            await proc.wait()


def seqs(lines: list[str]) -> list[int]:
    return [json.loads(line)["seq"] for line in lines]


async def test_status_watch_refreshes_until_ctrl_c(tmp_path: Path) -> None:
    async with running(tmp_path, {"echo": echo_provider()}) as (daemon, path), connect(path) as client:
        await turn(client, "thr_watch", "hello watch")
        command = [sys.executable, "-m", "bbridge", "status", "--socket", str(path), "--watch", "0.1"]
        proc = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        seen = b""
        with trio.fail_after(20):
            while seen.count(ops.CLEAR.encode()) < 3:
                seen += await proc.stdout.receive_some()
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            assert await proc.wait() == 0
    screens = seen.decode().split(ops.CLEAR)
    assert all("thr_watch" in screen for screen in screens[1:3])


async def test_status_shows_the_provider_and_the_thread(tmp_path: Path) -> None:
    async with running(tmp_path, {"echo": echo_provider()}) as (daemon, path), connect(path) as client:
        await turn(client, "thr_ops", "hello status")
        result = await bbridge("status", "--socket", str(path))
        assert result.returncode == 0, result.stderr
        text = result.stdout.decode()
        last_seq = len(client.entries["thr_ops"])
        assert "  echo  ready, pid " in text and ", 1 thread" in text
        (row,) = [line for line in text.splitlines() if line.startswith("  thr_ops ")]
        assert row.split()[:2] == ["thr_ops", "echo"] and row.split()[-1] == str(last_seq)
        assert "  THREAD " in text and " WAITING ON " in text
        assert "\ncounters:\n  deltas_in: " in text and "\njournal:\n" in text

        result = await bbridge("status", "--socket", str(path), "--json")
        assert result.returncode == 0, result.stderr
        assert result.stdout.count(b"\n") == 1
        status = json.loads(result.stdout)
        assert {"providerId": "echo", "state": "ready"}.items() <= status["providers"][0].items()
        assert [(t["threadId"], t["lastSeq"]) for t in status["threads"]] == [("thr_ops", last_seq)]


async def test_status_names_a_refused_token(tmp_path: Path) -> None:
    (tmp_path / "good").write_text("s3cret\n")
    (tmp_path / "bad").write_text("guess\n")
    async with running(tmp_path, {"echo": echo_provider()}, token="s3cret") as (daemon, path):
        for args, given in ((), "a client without a token"), (("--token-file", str(tmp_path / "bad")), "the token"):
            result = await bbridge("status", "--socket", str(path), *args)
            assert result.returncode == 1
            assert result.stdout == b""
            [line] = result.stderr.decode().splitlines()
            assert line.startswith(f"bbridge status: the daemon on {path} refused {given}")
        result = await bbridge("status", "--socket", str(path), "--token-file", str(tmp_path / "good"))
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(b"daemon: bbridge ")


def test_status_and_tail_say_when_nothing_listens(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(stale))  # a socket file nobody listens on
    for path in (tmp_path / "absent.sock", stale):
        for command in ("status", "tail"):
            result = subprocess.run([*BBRIDGE, command, "--socket", str(path)], capture_output=True, timeout=30)
            assert result.returncode == 1
            [line] = result.stderr.decode().splitlines()
            assert line.startswith(f"bbridge {command}: no daemon is listening on {path} (")


async def test_tail_replays_a_thread_then_follows_it_live(tmp_path: Path) -> None:
    async with running(tmp_path, {"echo": echo_provider()}) as (daemon, path), connect(path) as client:
        await turn(client, "thr_t", "first turn")
        await turn(client, "thr_other", "not this thread")
        replayed = len(client.entries["thr_t"])
        async with (
            tailing("--socket", str(path), "--thread", "thr_t", "--json") as as_json,
            tailing("--socket", str(path), "--thread", "thr_t") as readable,
        ):
            await as_json.until(lambda lines: len(lines) == replayed)
            await readable.until(lambda lines: "■ turn completed" in lines)
            await turn(client, "thr_t", "slow:20 second turn streamed live")
            total = len(client.entries["thr_t"])
            await as_json.until(lambda lines: len(lines) >= total)
            await readable.until(lambda lines: lines.count("■ turn completed") == 2)
        records = [json.loads(line) for line in as_json.lines]
        assert seqs(as_json.lines) == list(range(1, total + 1))
        assert {record["threadId"] for record in records} == {"thr_t"}
        assert [record["event"] for record in records] == client.events("thr_t")
        assert "    echo: first turn" in readable.lines
        assert "    echo: slow:20 second turn streamed live" in readable.lines
        assert not any("not this thread" in line for line in readable.lines)


async def test_tail_started_mid_turn_prints_every_seq_once(tmp_path: Path) -> None:
    """Events that arrive live while the replay is in flight are not printed twice, nor skipped."""
    async with running(tmp_path, {"echo": echo_provider()}) as (daemon, path), connect(path) as client:
        await client.request(
            "thread/start", {"providerId": "echo", "threadId": "thr_m", "cwd": "/tmp", "options": FULL}
        )
        params = {"providerId": "echo", "threadId": "thr_m", "clientRequestId": "creq_abcdefghjk", "options": FULL}
        prompt = "slow:25 " + " ".join(f"word{n}" for n in range(80))  # about 2 s of streaming
        await client.request("turn/start", {**params, "input": [{"type": "text", "text": prompt, "mentions": []}]})
        await client.wait_for(lambda: "item/agentMessage/delta" in client.types("thr_m"))
        async with tailing("--socket", str(path), "--thread", "thr_m", "--json") as tail:
            await client.wait_for(lambda: "turn/completed" in client.types("thr_m"))
            total = len(client.entries["thr_m"])
            await tail.until(lambda lines: len(lines) >= total)
            with trio.move_on_after(0.3):  # a duplicate would come right behind the last line
                await tail.until(lambda lines: len(lines) > total)
        assert seqs(tail.lines) == list(range(1, total + 1))


async def test_tail_of_every_thread_names_each_and_replays_after_seq(tmp_path: Path) -> None:
    async with running(tmp_path, {"echo": echo_provider()}) as (daemon, path), connect(path) as client:
        await turn(client, "thr_a", "alpha")
        await turn(client, "thr_b", "beta")
        async with (
            tailing("--socket", str(path)) as live,
            tailing("--socket", str(path), "--after-seq", "0", "--json") as replayed,
        ):
            replayed_count = len(client.entries["thr_a"]) + len(client.entries["thr_b"])
            await replayed.until(lambda lines: len(lines) == replayed_count)
            with trio.fail_after(20):
                while len(daemon.fanout.clients) < 3:  # the live tail prints nothing before the next turn: wait for it
                    await trio.sleep(0.02)
            await turn(client, "thr_a", "gamma")
            await live.until(lambda lines: "[thr_a] ■ turn completed" in lines)
            total = len(client.entries["thr_a"]) + len(client.entries["thr_b"])
            await replayed.until(lambda lines: len(lines) >= total)
        assert "[thr_a]     echo: gamma" in live.lines
        assert not any("alpha" in line or "beta" in line for line in live.lines)
        by_thread: dict[str, list[int]] = {}
        for line in replayed.lines:
            record = json.loads(line)
            by_thread.setdefault(record["threadId"], []).append(record["seq"])
        assert by_thread == {tid: list(range(1, len(client.entries[tid]) + 1)) for tid in ("thr_a", "thr_b")}


async def test_tail_exits_0_on_ctrl_c_and_when_the_daemon_shuts_down(tmp_path: Path) -> None:
    async with running(tmp_path, {"echo": echo_provider()}) as (daemon, path), connect(path) as client:
        await turn(client, "thr_s", "before shutdown")
        async with (
            tailing("--socket", str(path), "--thread", "thr_s") as interrupted,
            tailing("--socket", str(path), "--thread", "thr_s") as left,
        ):
            for tail in (interrupted, left):
                await tail.until(lambda lines: "■ turn completed" in lines)
            interrupted.proc.send_signal(signal.SIGINT)
            with trio.fail_after(20):
                assert await interrupted.proc.wait() == 0
            daemon.request_shutdown()
            with trio.fail_after(20):
                assert await left.proc.wait() == 0


async def test_live_events_the_replay_already_held_are_dropped() -> None:
    """The race `bbridge tail` closes, made deterministic: seqs 3-5 arrive live before the replay of 1-4 answers."""
    out = io.StringIO()
    tail = Tail(out, as_json=True, thread_id="thr_x")
    send, receive = trio.open_memory_channel[Notice](math.inf)

    def entries(*numbers: int) -> list[dict[str, Any]]:
        return [{"seq": n, "event": {"type": "x", "n": n}} for n in numbers]

    def note(*numbers: int) -> Notice:
        return Notice.of("thread/events", {"threadId": "thr_x", "providerId": "echo", "events": entries(*numbers)})

    class Daemon:
        """What `Tail` uses of a `Client`: the replay, what is pending, and the notifications queued meanwhile."""

        async def thread_events(self, thread_id: str, after_seq: int = 0) -> ThreadEventsResult:
            assert (thread_id, after_seq) == ("thr_x", 0)
            send.send_nowait(note(3, 4))
            send.send_nowait(note(5))
            return msgspec.convert({"events": entries(1, 2, 3, 4), "lastSeq": 4}, ThreadEventsResult)

        async def pending(self, thread_id: str | None = None) -> ThreadPendingResult:
            return ThreadPendingResult(pending=[])  # nothing waits: the tail goes on to the live events

        async def notifications(self) -> AsyncIterator[Notice]:
            async for item in receive:
                yield item

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tail.follow, Daemon(), None)
        await trio.testing.wait_all_tasks_blocked()
        send.send_nowait(note(6))
        send.close()
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"threadId": "thr_x", **entry} for entry in entries(1, 2, 3, 4, 5, 6)
    ]


def test_status_renders_sections_it_does_not_know_generically() -> None:
    status = {
        "daemon": {"name": "bbridge", "version": "9", "uptimeS": 3725.5, "clients": 1},
        "providers": [{"providerId": "idle-one", "state": "idle"}],
        "threads": [],
        "counters": {"deltas_in": 0},
        "config": {
            "path": "/etc/bbridge.toml",
            "refused": [{"section": "providers.x", "key": "command", "error": "missing"}],
        },
        "journal": {"dir": None, "writeErrors": 2, "lastWriteError": "disk full"},
        "future": [1, {"a": True}],
    }
    assert format_status(status) == [
        "daemon: bbridge 9, up 1h02m05s, 1 client (this one included)",
        "providers:",
        "  idle-one  idle",
        "threads: none",
        "counters:",
        "  deltas_in: 0",
        "config:",
        "  path: /etc/bbridge.toml",
        "  refused: 1",
        "    [providers.x] command: missing",
        "journal:",
        "  dir: -",
        "  writeErrors: 2",
        "  lastWriteError: disk full",
        "future:",
        "  - 1",
        '  - {"a":true}',
    ]
