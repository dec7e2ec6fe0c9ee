"""Running a command tool (bbridge.toolhost.runner): isolation, bounds, kills, results, retries."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.toolhost import runner
from bbridge.toolhost.declarations import HostedTool, Retry

# Spawns a child that sleeps, writes "leader child" pids to argv[1], then sleeps itself (SIGTERM ignored by both)
SLEEPER = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def _python(script: str, *args: str, **more: Any) -> HostedTool:
    return HostedTool(name="py", source="test", description="d", command=[sys.executable, "-c", script, *args], **more)


def _text(result: dict[str, Any]) -> str:
    return "".join(item["text"] for item in result["contentItems"])


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie no reaper has collected yet does not run)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def _none_left(pids: list[int]) -> bool:
    for _ in range(100):  # a reparented child is reaped by whoever reaps orphans: give it a moment
        if not any(_alive(pid) for pid in pids):
            return True
        await trio.sleep(0.05)
    return False


async def _pids(path: Path) -> list[int]:
    for _ in range(400):
        if path.exists():
            return [int(pid) for pid in path.read_text().split()]
        await trio.sleep(0.025)
    raise AssertionError(f"{path} never written")


async def test_past_its_timeout_the_tool_and_its_children_are_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "GRACE_S", 0.2)
    pidfile = tmp_path / "pids"
    tool = _python(SLEEPER, "{pidfile}", timeout_s=3.0)  # time enough to start both on a busy machine
    run = await runner.run(tool, {"pidfile": str(pidfile)}, str(tmp_path), {})
    assert run.status == "timeout"
    assert run.result["success"] is False
    assert "timed out after 3 s" in _text(run.result)
    pids = await _pids(pidfile)
    assert await _none_left(pids)


async def test_a_cancelled_call_leaves_no_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    tool = _python(SLEEPER, "{pidfile}", timeout_s=60.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runner.run, tool, {"pidfile": str(pidfile)}, str(tmp_path), {})
        pids = await _pids(pidfile)
        assert all(_alive(pid) for pid in pids)
        nursery.cancel_scope.cancel()
    assert await _none_left(pids)


async def test_hostile_arguments_reach_the_tool_as_one_literal_argv_element_each(tmp_path: Path) -> None:
    tool = _python("import json, sys; print(json.dumps(sys.argv[1:]))", "{a}", "--", "{b}")
    run = await runner.run(tool, {"a": "x; rm -rf ~", "b": "$(id)"}, str(tmp_path), {})
    assert json.loads(_text(run.result)) == ["x; rm -rf ~", "--", "$(id)"]


async def test_only_the_listed_variables_stdin_closed_and_the_thread_cwd(tmp_path: Path) -> None:
    script = (
        "import json, os, sys; print(json.dumps({'env': dict(os.environ), 'stdin': sys.stdin.read(), "
        "'fd0': os.readlink('/proc/self/fd/0'), 'cwd': os.getcwd()}))"
    )
    environ = {"BB_LISTED": "yes", "BB_SECRET": "no"}
    run = await runner.run(_python(script, env=["BB_LISTED", "BB_ABSENT"]), {}, str(tmp_path), environ)
    seen = json.loads(_text(run.result))
    assert seen["env"].get("BB_LISTED") == "yes"
    assert "BB_SECRET" not in seen["env"] and "BB_ABSENT" not in seen["env"]
    assert seen["stdin"] == "" and seen["fd0"] == "/dev/null"
    assert seen["cwd"] == str(tmp_path.resolve())


async def test_output_past_the_cap_is_cut_with_a_marker(tmp_path: Path) -> None:
    tool = _python("import sys; sys.stdout.write('a' * 100000)", max_output_bytes=100)
    run = await runner.run(tool, {}, str(tmp_path), {})
    assert run.result["success"] is True
    assert _text(run.result) == "a" * 100 + "\n[output cut: the first 100 of 100000 bytes]"
    assert run.bytes_out == 100000


async def test_a_non_zero_exit_is_an_error_carrying_the_stderr_tail(tmp_path: Path) -> None:
    tool = _python("import sys; print('x' * 9000, file=sys.stderr); print('boom', file=sys.stderr); sys.exit(3)")
    run = await runner.run(tool, {}, str(tmp_path), {})
    assert run.status == "error" and run.exit_status == 3
    text = _text(run.result)
    assert text.startswith("py exited with status 3")
    assert text.rstrip().endswith("boom")
    assert len(text) < runner.TAIL_BYTES + 200  # the tail, not all of stderr


async def test_an_mcp_shaped_stdout_is_the_result(tmp_path: Path) -> None:
    answer = {
        "content": [{"type": "text", "text": "hi"}, {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}],
        "isError": True,
    }
    run = await runner.run(_python(f"print({json.dumps(json.dumps(answer))})"), {}, str(tmp_path), {})
    assert run.result == {
        "success": False,
        "contentItems": [
            {"type": "inputText", "text": "hi"},
            {"type": "inputImage", "imageUrl": "data:image/png;base64,iVBORw0KGgo="},
        ],
    }
    other = await runner.run(_python("print('{\"content\": 1}')"), {}, str(tmp_path), {})
    assert other.result == {"success": True, "contentItems": [{"type": "inputText", "text": '{"content": 1}\n'}]}


# Appends its argv[1] to argv[2], then fails (exit 1) unless argv[1] is "good"; prints "" for "empty"
FLAKY = """
import sys
with open(sys.argv[2], "a") as f:
    f.write(sys.argv[1] + "\\n")
if sys.argv[1] not in ("good", "empty"):
    sys.exit(1)
print("" if sys.argv[1] == "empty" else "done")
"""


async def _flaky(tmp_path: Path, first: str, retry: Retry) -> tuple[runner.Run, list[str]]:
    log = tmp_path / "attempts"
    run = await runner.run(_python(FLAKY, "{mode}", str(log), retry=retry), {"mode": first}, str(tmp_path), {})
    return run, log.read_text().split()


async def test_retry_on_error_then_param_fallbacks_in_turn(tmp_path: Path) -> None:
    run, tried = await _flaky(
        tmp_path, "bad", Retry(on_error=True, max_attempts=3, param_fallbacks={"mode": ["worse", "good"]})
    )
    assert tried == ["bad", "worse", "good"]
    assert run.status == "ok" and run.attempts == 3


async def test_no_retry_without_on_error_and_max_attempts_caps(tmp_path: Path) -> None:
    run, tried = await _flaky(tmp_path, "bad", Retry(on_error=False, max_attempts=3))
    assert tried == ["bad"] and run.status == "error"
    (tmp_path / "attempts").unlink()
    run, tried = await _flaky(tmp_path, "bad", Retry(on_error=True, max_attempts=2))
    assert tried == ["bad", "bad"] and run.attempts == 2


async def test_retry_on_empty(tmp_path: Path) -> None:
    retry = Retry(on_empty=True, max_attempts=2, param_fallbacks={"mode": ["good"]})
    run, tried = await _flaky(tmp_path, "empty", retry)
    assert tried == ["empty", "good"]
    assert _text(run.result) == "done\n"


async def test_a_program_that_cannot_start_is_named(tmp_path: Path) -> None:
    tool = HostedTool(
        name="ghost", source="test", description="d", command=["/nonexistent/prog"], retry=Retry(on_error=True)
    )
    run = await runner.run(tool, {}, str(tmp_path), {})
    assert run.status == "unstartable" and run.attempts == 1
    assert _text(run.result).startswith("ghost: cannot start '/nonexistent/prog'")


async def test_no_working_directory_refuses_clearly(tmp_path: Path) -> None:
    tool = _python("print('ran')")
    missing = await runner.run(tool, {}, None, {})
    assert missing.status == "refused" and "no working directory" in _text(missing.result)
    gone = await runner.run(tool, {}, str(tmp_path / "gone"), {})
    assert gone.status == "refused" and "is not a directory" in _text(gone.result)


async def test_what_the_tool_leaves_behind_is_killed_when_it_exits(tmp_path: Path) -> None:
    script = (
        "import subprocess, sys; child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(child.pid)"
    )
    run = await runner.run(_python(script, timeout_s=10.0), {}, str(tmp_path), {})
    assert run.status == "ok"  # not held until the timeout by the child's copy of stdout
    assert await _none_left([int(_text(run.result))])
