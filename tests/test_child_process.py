"""The process mechanics the daemon and every agent bridge share: `wire.process`, `wire.tee`, `kit.child`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import trio
import trio.testing

from bbridge.kit.child import Child, run_once
from bbridge.wire import process, tee
from bbridge.wire.process import StderrTail, StopPlan


def script(body: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(body)]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def until_gone(pid: int, timeout: float = 5.0) -> bool:
    with trio.move_on_after(timeout):
        while not gone(pid):
            await trio.sleep(0.02)
        return True
    return False


def lane(path: Path) -> list[str]:
    return [json.loads(line)["line"] for line in path.read_text().splitlines()]


# -- the tee ----------------------------------------------------------------------------


async def test_the_tee_records_whole_lines_only_on_both_sides() -> None:
    to_child, child_in = trio.testing.memory_stream_one_way_pair()
    child_out, from_child = trio.testing.memory_stream_one_way_pair()
    sent: list[bytes] = []
    got: list[bytes] = []
    send, receive = tee.tee(to_child, from_child, sent.append, got.append)
    await send.send_all(b'{"a":1}\n{"b"')  # a write that is not a whole line is not recorded as one
    assert sent == [b'{"a":1}']
    await send.send_all(b":2}\r\n")
    assert sent == [b'{"a":1}', b'{"b":2}']
    assert await child_in.receive_some() == b'{"a":1}\n{"b":2}\r\n'
    await child_out.send_all(b"one\ntw")
    assert await receive.receive_some() == b"one\ntw"
    await child_out.send_all(b"o\n")
    await receive.receive_some()
    assert got == [b"one", b"two"]


# -- the stderr tail ----------------------------------------------------------------------


def test_the_stderr_tail_is_bounded_in_lines_and_bytes() -> None:
    seen: list[str] = []
    tail = StderrTail(3, max_bytes=10, line_bytes=8, on_line=seen.append)
    tail.feed(b"one\ntwo\n\nthree\nfour")
    assert tail.lines == ["two", "", "three"]
    tail.feed(b"\n" + b"x" * 20 + b"\nlast")
    tail.close()
    assert tail.lines == ["four", "x" * 8, "last"]  # cut to `line_bytes`; the unterminated end at close
    assert tail.text == ("x" * 20 + "\nlast")[-10:]
    assert seen[:4] == ["one", "two", "", "three"]


def test_a_long_stderr_line_is_kept_cut_and_blank_lines_can_be_skipped() -> None:
    tail = StderrTail(5, line_bytes=8, skip_blank=True)
    tail.feed(b"\n  \n" + b"y" * 9000 + b"\nok\n")
    assert tail.lines == ["y" * 8, "ok"]


# -- the agent child ----------------------------------------------------------------------


async def test_a_child_runs_in_its_own_group_with_the_given_env_and_lines(recording: Path) -> None:
    child = Child(
        script(
            """
            import os, sys
            print(os.getpgid(0) == os.getpid(), os.environ.get("ONLY"), os.environ.get("HOME"), flush=True)
            print(sys.stdin.readline().strip(), flush=True)
            sys.stderr.write("warn 1\\nwarn 2")
            sys.stdout.write("no newline")
            """
        ),
        env={"ONLY": "given", "PATH": os.environ["PATH"]},
        cwd=str(recording),
        thread_id="thr 1",
    )
    await child.spawn()
    assert await child.write(b"hello\n")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(child.pump_stderr)
        lines = [line async for line in child.lines()]
    assert lines == [b"True given None", b"hello", b"no newline"]
    assert await child.wait() == 0
    assert child.stderr.lines == ["warn 1", "warn 2"]
    await child.close_stdin()
    assert not await child.write(b"late\n")
    assert lane(recording / "thr-1" / "bridge→provider.ndjson") == ["hello"]
    assert lane(recording / "thr-1" / "provider→bridge.ndjson") == ["True given None", "hello"]


async def test_a_child_out_of_the_lanes_is_not_recorded(recording: Path) -> None:
    child = Child(script("print('x')"), env=os.environ, cwd=None, thread_id=None, record=False, stderr=False)
    await child.spawn()
    assert [line async for line in child.lines()] == [b"x"]
    await child.wait()
    assert not (recording / "_process").exists()


async def test_a_spawn_that_cannot_start_raises_oserror(tmp_path: Path) -> None:
    child = Child([str(tmp_path / "missing")], env={}, cwd=None, thread_id=None)
    with pytest.raises(FileNotFoundError):
        await child.spawn()


IGNORES_TERM_WITH_A_GRANDCHILD = """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
    print(grandchild.pid, flush=True)
    time.sleep(60)
"""


async def test_stop_escalates_to_sigkill_and_takes_the_group(tmp_path: Path) -> None:
    child = Child(script(IGNORES_TERM_WITH_A_GRANDCHILD), env=os.environ, cwd=None, thread_id=None)
    await child.spawn()
    grandchild = await first_line(child)
    started = trio.current_time()
    await child.stop(StopPlan(grace_s=0.3))
    assert child.returncode == -signal.SIGKILL
    assert 0.3 <= trio.current_time() - started < 3
    assert await until_gone(grandchild)


async def test_stop_waits_for_a_voluntary_exit_after_stdin_closes() -> None:
    child = Child(script("import sys; sys.stdin.read()"), env=os.environ, cwd=None, thread_id=None)
    await child.spawn()
    await child.stop(StopPlan(grace_s=5, wait_s=5))
    assert child.returncode == 0


async def test_stop_terms_the_leader_only_unless_asked_and_signals_leftovers() -> None:
    body = """
        import signal, subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(grandchild.pid, flush=True)
        time.sleep(60)
    """
    child = Child(script(body), env=os.environ, cwd=None, thread_id=None)
    proc = await child.spawn()
    grandchild = await first_line(child)
    await process.stop(proc, StopPlan(grace_s=5, leftovers=None))
    assert proc.returncode == -signal.SIGTERM
    assert not gone(grandchild)  # the leader alone was asked to stop
    process.send_signal(proc.pid, signal.SIGTERM, group=True)  # what the daemon's leftovers step sends
    assert await until_gone(grandchild)


async def first_line(child: Child) -> int:
    async with contextlib.aclosing(child.lines()) as lines:
        async for line in lines:
            return int(line)
    raise AssertionError("no line")


# -- one-shot commands ----------------------------------------------------------------------


async def test_run_once_captures_output_and_status() -> None:
    done = await run_once(
        script("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"), env=os.environ, timeout=10
    )
    assert done is not None
    assert (done.returncode, done.stdout, done.stderr) == (3, b"out\n", b"err\n")


async def test_run_once_past_its_timeout_kills_the_group() -> None:
    body = """
        import subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open(sys.argv[1], "w").write(str(grandchild.pid))
        time.sleep(60)
    """
    with tempfile.NamedTemporaryFile("r") as pid_file:
        started = trio.current_time()
        assert await run_once([*script(body), pid_file.name], env=os.environ, timeout=1.0) is None
        assert trio.current_time() - started < 5
        assert await until_gone(int(pid_file.read()))


async def test_run_once_that_cannot_start_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        await run_once([str(tmp_path / "missing")], env={}, timeout=1)
