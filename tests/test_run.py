"""`bbridge run`: one turn against a bridge, the live timeline, the exit status."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bbridge.core.events import EVENT_TYPES
from tests.support import FAKE

ECHO = f"{sys.executable} -m bridges.echo"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bbridge", "run", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_readable_timeline_of_a_plain_turn() -> None:
    result = run("--provider-cmd", ECHO, "--prompt", "hello timeline")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("▶ turn ")
    assert "    echo: hello timeline" in lines
    assert any(line.startswith("  usage: ") for line in lines)
    assert lines[-1] == "■ turn completed"


def test_json_mode_emits_all_30_event_types_for_deltas_all() -> None:
    result = run("--provider-cmd", ECHO, "--prompt", "deltas:all", "--json")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert {event["type"] for event in events} == set(EVENT_TYPES)
    assert all(event["threadId"].startswith("thr_run") for event in events)


LOOKUP = {
    "name": "lookup",
    "description": "Looks a word up",
    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
    "presentation": {"label": {"pending": "Looking up", "completed": "Looked up"}, "icon": {"glyph": "Search"}},
    "answer": {"success": True, "contentItems": [{"type": "inputText", "text": "42"}]},
}


def test_declared_tools_are_called_and_shown_with_their_presentation(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([LOOKUP]))
    result = run("--provider-cmd", ECHO, "--tools", str(tools), "--prompt", 'tool:lookup args:{"q":"x"}')
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1:4] == [
        "  ◦ Looking up",
        "  ? item/tool/call: answered automatically (bbridge run is not interactive)",
        "  ✓ Looked up",
    ]
    assert "    echo: lookup → 42" in lines


def test_a_tools_file_that_is_not_a_tool_list_is_refused(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"name": "lookup"}]))
    result = run("--provider-cmd", ECHO, "--tools", str(tools), "--prompt", "hi")
    assert result.returncode == 2
    assert result.stderr.startswith(f"bbridge run: --tools {tools}: ")


def test_a_failed_turn_exits_non_zero_with_the_reason() -> None:
    result = run("--provider-cmd", ECHO, "--prompt", "fail:out_of_quota")
    assert result.returncode == 1
    assert "■ turn failed" in result.stdout
    assert "  ! error: out of quota" in result.stdout.splitlines()
    assert result.stderr.strip().endswith("bbridge run: failed: out of quota")


def test_a_refused_handshake_exits_non_zero_with_the_reason() -> None:
    result = run("--provider-cmd", f"{sys.executable} {FAKE} old-protocol", "--prompt", "x")
    assert result.returncode == 1
    assert "speaks Provider Bridge Protocol version 1, but this runtime requires version 2" in result.stderr


def test_a_bridge_that_crashes_mid_turn_exits_non_zero() -> None:
    result = run("--provider-cmd", f"{sys.executable} {FAKE} crash-mid-turn", "--prompt", "x")
    assert result.returncode == 1
    assert "exited unexpectedly (code 3)" in result.stderr


JUNK = "import sys; print('hello, not json'); sys.exit(0)"
STDERR = "import sys; sys.stderr.write('Traceback (most recent call last):\\nValueError: MY_API_KEY is not set\\n'); sys.exit(3)"
NEWCOMER = [
    (
        ["no-such-bridge"],
        "Provider 'bridge' failed to start: [Errno 2] No such file or directory: 'no-such-bridge' (is it installed,"
        " and on the daemon's PATH or named by its full path?)",
    ),
    (
        [sys.executable, "-c", JUNK],
        "Provider 'bridge' exited during startup with code 0; its stdout was not JSON-RPC: \"hello, not json\"",
    ),
    (
        [sys.executable, "-c", STDERR],
        "Provider 'bridge' exited during startup with code 3; its stderr ended:"
        ' "Traceback (most recent call last):" / "ValueError: MY_API_KEY is not set"',
    ),
    (
        [sys.executable, str(FAKE), "grammar-2"],
        'Provider bridge "bridge" speaks thread/delta grammar versions 2-2, but this runtime assembles versions 3-3.',
    ),
]


@pytest.mark.parametrize(("command", "reason"), NEWCOMER, ids=["missing", "junk", "stderr", "refused"])
def test_the_errors_a_newcomer_meets_are_one_line_said_once(command: list[str], reason: str) -> None:
    """Issue 21: each start failure is one line, its reason once, with what the bridge printed."""
    result = run("--provider-cmd", shlex.join(command), "--prompt", "hi")
    assert result.returncode == 1
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("bbridge run: failed: ")]
    assert line.startswith(f"bbridge run: failed: {reason}"), line
    assert line.count(reason[:40]) == 1


# records its pid and its parent's command line, then becomes the echo bridge
WHO = """import os, sys
parent = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
open(sys.argv[1], "w").write(" ".join([str(os.getpid()), str(os.getppid()), *parent]))
os.execv(sys.executable, [sys.executable, "-m", "bridges.echo"])
"""


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_the_daemon_is_a_bbridge_serve_child_and_nothing_outlives_the_run(tmp_path: Path) -> None:
    """Issue 24: run talks to `bbridge serve` (coalescing off, open extensions, its log level) through
    bbridge.client; when it ends, neither the daemon nor the bridge is left running."""
    who = tmp_path / "who"
    command = shlex.join([sys.executable, "-c", WHO, str(who)])
    result = run("--provider-cmd", command, "--prompt", "hello serve", "--log-level", "error")
    assert result.returncode == 0, result.stderr
    assert "    echo: hello serve" in result.stdout.splitlines()
    bridge, daemon, *parent = who.read_text().split()
    assert parent[1:4] == ["-m", "bbridge", "serve"]
    assert {"--open-extensions", "--flush-ms 0", "--log-level error"} <= {
        " ".join(parent[i : i + n]) for i in range(len(parent)) for n in (1, 2)
    }
    for pid in (int(bridge), int(daemon)):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
