"""An editor's MCP server reaches a Codex and a pi thread THROUGH `bbridge acp` as a callable tool (issue 36).

acpx (`make acpx`) runs `bbridge acp` with `--mcp-config` naming a stdio MCP server (tests/mcp_server.py, stdlib
only) as the editor's `session/new` `mcpServers`; the in-process daemon's tool host starts it for the session's
thread and offers its tools to the REAL agent behind it (`make live-agents`: `codex app-server`, pi), each
against its scripted model server on 127.0.0.1 and configured by a `bbridge.toml` whose provider entry is the
live tests' own (`tests.live.agents.world`). The scripted model calls `editor__echo`; the server's answer is in
the model's next request; every message `bbridge acp` wrote validates against the ACP JSON Schema; nothing the
run started outlives acpx.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bbridge.daemon.config import ProviderConfig
from tests.acp_schema import acpx_problems
from tests.conftest import REPO
from tests.live.agents import world
from tests.live.processes import no_leftovers
from tests.live.runner import acpx_command, offline_env
from tests.test_acp_acpx import answers

SERVER = REPO / "tests" / "mcp_server.py"


def toml_value(value: object) -> str:
    """A TOML value of a str, list or str table (JSON's string escapes are TOML's)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def config(root: Path, provider: str, entry: ProviderConfig) -> Path:
    """A `bbridge.toml` whose one provider (the sessions' default) is `entry`."""
    path = root / "bbridge.toml"
    lines = ["[acp]", f"default_provider = {json.dumps(provider)}", "", f"[providers.{provider}]"]
    lines += [f"{key} = {toml_value(value)}" for key in ("command", "cwd", "env") if (value := getattr(entry, key))]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("name", ["codex", "pi"])
def test_an_editors_mcp_server_is_a_tool_the_agent_behind_bbridge_acp_calls(name: str, tmp_path: Path) -> None:
    home = tmp_path / "acpx-home"
    home.mkdir()
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": [{"name": "editor", "command": sys.executable,
                                                   "args": [str(SERVER)], "env": []}]}))  # fmt: skip
    with world(name, tmp_path) as agent:
        agent.script("editor__echo", {"text": f"hello from {name}"})
        acp = [sys.executable, "-m", "bbridge", "acp", "--config", str(config(tmp_path, name, agent.config))]
        argv = acpx_command(acp, agent.cwd, "Echo it.", mcp_config=servers, timeout_s=90)
        done = subprocess.run(argv, env=offline_env(home), cwd=agent.cwd, capture_output=True, text=True,
                              timeout=150)  # fmt: skip
        no_leftovers([tmp_path], f"bbridge acp, the {name} bridge or the editor's MCP server outlived acpx")
        assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
        assert (
            f'"hello from {name}"' in agent.tool_result_text()
        )  # the server's answer (its whole text) reached the model
    lines = done.stdout.splitlines()
    calls = [json.loads(line)["params"]["update"] for line in lines if '"tool_call' in line]
    assert any("editor__echo" in json.dumps(call) for call in calls)
    assert answers(lines, "stopReason") == ["end_turn"]
    problems, checked = acpx_problems(lines)
    assert problems == [] and checked > 5
