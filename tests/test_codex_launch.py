"""Launching and framing app-server children (spec §1.3–§1.5): the replay seam, the environment, and the
reader's sorting of lines; the handshake lines are checked against every recorded `bridge→provider` lane."""

from __future__ import annotations

from pathlib import Path

import pytest

from bbridge.core import js
from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, read_cell
from bridges.codex import child, launch

ROOT = Path(__file__).resolve().parents[2] / "shared" / "recordings" / "codex"


def test_argv_from_the_replay_seam() -> None:
    assert launch.argv({}) == ["codex", "app-server"]
    # beyond the spec (issue 31): a command alone is a codex binary, run as the app-server; `[]` runs it bare
    assert launch.argv({launch.COMMAND_ENV: "/opt/codex"}) == ["/opt/codex", "app-server"]
    assert launch.argv({launch.COMMAND_ENV: "/opt/codex", launch.ARGS_ENV: ""}) == ["/opt/codex", "app-server"]
    assert launch.argv({launch.COMMAND_ENV: "python", launch.ARGS_ENV: "[]"}) == ["python"]
    assert launch.argv({launch.COMMAND_ENV: "python", launch.ARGS_ENV: '["-m","fake"]'}) == ["python", "-m", "fake"]
    with pytest.raises(launch.LaunchError):
        launch.argv({launch.COMMAND_ENV: "python", launch.ARGS_ENV: '["-m", 1]'})


def test_child_environment_drops_bb_variables() -> None:
    env = {
        "PATH": "/bin",
        "BB_THREAD": "x",
        "NODE_ENV": "p",
        "ELECTRON_RUN_AS_NODE": "1",
        "EMPTY": "",
        "CODEX_HOME": "/c",
    }
    assert launch.child_env(env) == {"PATH": "/bin", "CODEX_HOME": "/c"}


def test_classify_lines() -> None:
    assert child.classify("  ") is None and child.classify("not json") is None and child.classify("[1]") is None
    assert child.classify('{"id":"3","result":{"a":1}}') == child.CodexResponse(3.0, None, {"a": 1})
    assert child.classify('{"id":2,"error":{"code":-32600,"message":"no"}}') == child.CodexResponse(2.0, "no", None)
    assert child.classify('{"id":2,"error":{"code":-1}}') == child.CodexResponse(
        2.0, "codex app-server returned error code -1", None
    )
    assert child.classify('{"id":0,"method":"item/tool/call","params":{}}') == child.CodexRequest(
        0, "item/tool/call", {}
    )
    note = child.classify('{"id":null,"method":"turn/started","params":{"a":1},"emittedAtMs":5}')
    assert note == child.CodexNotification("turn/started", {"method": "turn/started", "params": {"a": 1}})
    assert child.classify('{"method":3}') is None


@pytest.mark.skipif(not ROOT.exists(), reason="no recordings")
def test_handshake_lines_match_every_recorded_lane() -> None:
    firsts = []
    for cell in sorted(ROOT.iterdir()):
        for entry in read_cell(cell):
            message = js.parse(entry.line)
            if entry.dir == BRIDGE_TO_PROVIDER and message.get("method") == "initialize":
                firsts.append(entry.line)
    assert firsts and set(firsts) == {
        child.request_line(1, "initialize", launch.INITIALIZE_PARAMS).decode().rstrip("\n")
    }
    assert (
        child.request_line(2, "account/rateLimits/read")
        == b'{"jsonrpc":"2.0","id":2,"method":"account/rateLimits/read"}\n'
    )
    assert child.result_line(0, {"decision": "accept"}) == b'{"jsonrpc":"2.0","id":0,"result":{"decision":"accept"}}\n'
    assert child.error_line(4, -32601, "x") == b'{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"x"}}\n'
