"""acpx drives `bbridge acp` on a REAL agent (issue 36): the pinned Claude Code CLI (`make live-agents`) against its
scripted Anthropic server on 127.0.0.1, behind `bbridge acp`'s in-process daemon, configured by a `bbridge.toml`
whose `[providers.claude-code]` carries the CLI's whole offline environment (`env`, laid over the daemon's own).

The session runs in the face's default mode, `accept-edits` (workspace scope, the user reviews): the scripted model
writes a file outside the workspace with Claude Code's Write tool, which asks; the approval reaches acpx as
`session/request_permission`, `--approve-all` grants it (`allow_once`), and the file is written. Every message
`bbridge acp` wrote validates against the ACP JSON Schema; nothing it started outlives acpx.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.acp_schema import acpx_problems
from tests.live.anthropic import AnthropicServer, reply, text, tool_use
from tests.live.claude import ensure_cli
from tests.live.claude import offline_env as claude_env
from tests.live.processes import no_leftovers
from tests.live.runner import acpx_command, bridge_command, offline_env
from tests.test_acp_acpx import answers, said


def config(root: Path, ws: Path, api: AnthropicServer) -> Path:
    """The `bbridge.toml` of one Claude Code provider (the session's default), its env the CLI's offline one."""
    env = claude_env(api.url, root / "home", extra={"BB_CLAUDE_CODE_EXECUTABLE": str(ensure_cli())})
    table = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in env.items())
    path = root / "bbridge.toml"
    path.write_text(f"""\
[acp]
default_provider = "claude-code"

[providers.claude-code]
command = {json.dumps(bridge_command("bridges.claude_code"))}
cwd = {json.dumps(str(ws))}
env = {{ {table} }}
""")
    return path


def test_acpx_grants_a_claude_code_write_through_bbridge_acp_and_the_file_is_written(tmp_path: Path) -> None:
    ws, home, target = tmp_path / "ws", tmp_path / "home", tmp_path / "outside" / "note.txt"
    for folder in (ws, home, target.parent):
        folder.mkdir()
    with AnthropicServer() as api:
        api.script(
            reply(text("Writing it."), tool_use("Write", {"file_path": str(target), "content": "hello\n"})),
            text("finished"),
        )
        agent = [sys.executable, "-m", "bbridge", "acp", "--config", str(config(tmp_path, ws, api))]
        done = subprocess.run(acpx_command(agent, ws, "Write the note.", timeout_s=90), env=offline_env(home),
                              cwd=ws, capture_output=True, text=True, timeout=150)  # fmt: skip
        no_leftovers([tmp_path], "bbridge acp, its bridge or the claude CLI outlived acpx")
        assert not [r.target for r in api.requests if r.is_proxy_attempt]  # nothing left the machine
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    lines = done.stdout.splitlines()
    [asked] = [m["params"] for m in map(json.loads, lines) if m.get("method") == "session/request_permission"]
    assert asked["toolCall"]["kind"] == "edit" and "allow_once" in [o["optionId"] for o in asked["options"]]
    assert answers(lines, "outcome") == [{"outcome": "selected", "optionId": "allow_once"}]  # --approve-all
    assert target.read_text() == "hello\n"
    assert said(lines) == "Writing it.finished"
    assert answers(lines, "stopReason") == ["end_turn"]
    problems, checked = acpx_problems(lines)
    assert problems == [] and checked > 5
