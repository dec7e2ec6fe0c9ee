"""acpx, the pinned headless ACP client (`make acpx`), as `tests.live.runner.acpx_command` runs it: on the ACP
SDK's example agent (`@agentclientprotocol/sdk`'s `dist/examples/agent.js`, from `make acp-agents`), one `exec`
with `--approve-all` grants the agent's permission request and ends the turn, `--deny-all` denies it (exit 5); an
`--mcp-config` file's servers reach the agent in `session/new`; everything the agent wrote validates against the
ACP JSON Schema (tests/acp_schema.py over the whole session); nothing is left running and nothing is saved.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.acp_schema import acpx_problems
from tests.live.processes import leftovers
from tests.live.runner import CACHE, acpx_command, offline_env

EXAMPLE = CACHE / "acp" / "npm" / "node_modules" / "@agentclientprotocol" / "sdk" / "dist" / "examples" / "agent.js"


def example_agent() -> list[str]:
    node = shutil.which("node")
    if node is None or not EXAMPLE.exists():
        pytest.skip(f"node or the ACP SDK's example agent ({EXAMPLE}, `make acp-agents`) is missing")
    return [node, str(EXAMPLE)]


def run(argv: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=offline_env(root / "home"), cwd=root, capture_output=True, text=True, timeout=120)
    assert leftovers([root]) == {}  # `exec` leaves no queue owner nor agent behind
    return done


def messages(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_acpx_runs_an_agent_command_grants_its_permission_and_the_traffic_is_valid_acp(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    config = tmp_path / "mcp.json"
    server = {"name": "editor", "command": sys.executable, "args": ["-c", "pass"], "env": [{"name": "A", "value": "b"}]}
    config.write_text(json.dumps({"mcpServers": [server]}))
    done = run(acpx_command(example_agent(), tmp_path, "hello", mcp_config=config), tmp_path)
    assert done.returncode == 0, done.stderr
    sent = messages(done)
    [new] = [m for m in sent if m.get("method") == "session/new"]
    assert new["params"]["mcpServers"] == [server] and new["params"]["cwd"] == str(tmp_path)
    [asked] = [m for m in sent if m.get("method") == "session/request_permission"]
    [granted] = [m for m in sent if m.get("id") == asked["id"] and "result" in m and "outcome" in m["result"]]
    assert granted["result"]["outcome"] == {"outcome": "selected", "optionId": "allow"}
    assert any(m.get("result", {}).get("stopReason") == "end_turn" for m in sent)
    problems, checked = acpx_problems(done.stdout.splitlines())
    assert problems == [] and checked > 5
    assert not (tmp_path / "home" / ".acpx").exists()  # `exec` saves no session


def test_deny_all_refuses_the_permission_and_exits_5(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    done = run(acpx_command(example_agent(), tmp_path, "hello", permissions="--deny-all"), tmp_path)
    assert done.returncode == 5, done.stderr
    [answer] = [m for m in messages(done) if "outcome" in m.get("result", {})]
    assert answer["result"]["outcome"]["optionId"] == "reject"
