"""The CLI wire (spec §1.3–§1.5, §2): lines the bridge writes to a child, its command line and environment.

The recorded `bridge→provider` lanes pin `initialize`, the user line and the MCP answers; argv and environment
are not recorded (the fake CLI ignores them), so they are pinned by rule.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, PROVIDER_TO_BRIDGE, RUNTIME_TO_BRIDGE, lane_path, read_lane
from bridges.claude_code import child, dynamic_tools, launch
from tests.conftest import missing_reason, shared_path

CELL = shared_path("recordings", "claude-code", "turn-tools")


def _lane(direction: str) -> list[dict[str, Any]]:
    assert CELL is not None
    return [json.loads(e.line) for e in read_lane(lane_path(CELL, direction), direction)]


@pytest.mark.skipif(CELL is None, reason=missing_reason("recordings", "claude-code", "turn-tools"))
def test_recorded_initialize_user_line_and_mcp_answers() -> None:
    to_cli = _lane(BRIDGE_TO_PROVIDER)
    options = next(m for m in _lane(RUNTIME_TO_BRIDGE) if m.get("method") == "thread/start")["params"]["options"]
    init = to_cli[0]
    built = child.control_request(
        init["request_id"], child.initialize(mcp=True, instructions=options["instructions"], instruction_mode="append")
    )
    assert child.encode(built) == child.encode(init)
    user = to_cli[1]
    assert child.encode(child.user_line(user["message"]["content"], user["session_id"], user["uuid"])) == child.encode(
        user
    )
    from_cli = {m["request_id"]: m["request"] for m in _lane(PROVIDER_TO_BRIDGE) if m.get("type") == "control_request"}
    answered = 0
    for line in to_cli[2:]:
        request = from_cli[line["response"]["request_id"]]
        if request["subtype"] == "mcp_message" and request["message"].get("method") != "tools/list":
            reply = dynamic_tools.mcp_reply(request["message"], [])
            assert child.encode(
                child.control_success(line["response"]["request_id"], {"mcp_response": reply})
            ) == child.encode(line)
            answered += 1
        elif request["subtype"] == "hook_callback":
            assert child.hook_event(request["callback_id"]) == request["input"]["hook_event_name"]
    assert answered == 2


def test_mcp_server_lists_and_refuses_tools() -> None:
    tool = dynamic_tools.DynamicTool("update_environment_directory", "Move", {"type": "array"})
    listed = dynamic_tools.mcp_reply({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, [tool])
    assert listed == {
        "result": {
            "tools": [
                {"name": "update_environment_directory", "description": "Move", "inputSchema": {"type": "object"}}
            ]
        },
        "jsonrpc": "2.0",
        "id": 1,
    }
    assert (
        dynamic_tools.mcp_reply(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "update_environment_directory"}},
            [tool],
        )
        is None
    )
    unknown = dynamic_tools.mcp_reply(
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "nope"}}, [tool]
    )
    assert unknown == {
        "result": {"content": [{"type": "text", "text": "Unknown tool: nope"}], "isError": True},
        "jsonrpc": "2.0",
        "id": 3,
    }
    assert (
        dynamic_tools.mcp_reply({"jsonrpc": "2.0", "id": 4, "method": "resources/list"}, [])["error"]["code"] == -32601
    )  # type: ignore[index]


def test_tool_call_results_become_mcp_content() -> None:
    items = [
        {"type": "inputText", "text": ""},
        {"type": "inputText", "text": "hi"},
        {"type": "inputImage", "imageUrl": "data:image/png;base64,AAA"},
        {"type": "inputImage", "imageUrl": "https://x/y.png"},
    ]
    content, failed = dynamic_tools.tool_call_content({"success": True, "contentItems": items})
    assert content == [
        {"type": "text", "text": "hi"},
        {"type": "image", "data": "AAA", "mimeType": "image/png"},
        {"type": "text", "text": "https://x/y.png"},
    ]
    assert not failed
    assert dynamic_tools.tool_call_content({"success": False, "contentItems": []}) == (
        [{"type": "text", "text": "Tool call failed"}],
        True,
    )
    assert dynamic_tools.tool_call_content("junk") == ([{"type": "text", "text": "Invalid tool call response"}], True)


def test_command_line_order() -> None:
    spec = launch.Launch(
        permission_mode="acceptEdits",
        model="claude-opus-5[1m]",
        reasoning_level="ultracode",
        resume="sess-1",
        dynamic_tools=("a", "b"),
        disallowed_tools=("WebFetch",),
        sandbox=True,
        write_roots=("/extra",),
        plugin_dirs=("/skills",),
        root=False,
    )
    assert launch.arguments(spec) == [
        "--output-format", "stream-json", "--verbose", "--input-format", "stream-json",
        "--thinking", "adaptive", "--thinking-display", "summarized", "--effort", "xhigh",
        "--model", "claude-opus-5[1m]",
        "--permission-prompt-tool", "stdio",
        "--resume", "sess-1",
        "--allowedTools", "mcp__bb-bridge__a,mcp__bb-bridge__b",
        "--disallowedTools", "WebFetch",
        "--setting-sources=user,project,local",
        "--permission-mode", "acceptEdits",
        "--include-partial-messages",
        "--add-dir", "/extra",
        "--plugin-dir", "/skills",
        "--settings",
        '{"autoMemoryEnabled":true,"enableWorkflows":false,"ultracode":true,"sandbox":{"enabled":true,"failIfUnavailable":false,"autoAllowBashIfSandboxed":true,"allowUnsandboxedCommands":true,"network":{"allowLocalBinding":true},"filesystem":{"allowWrite":["/extra"]}}}',
    ]  # fmt: skip


def test_full_access_flags_depend_on_root() -> None:
    full = launch.Launch(permission_mode="bypassPermissions", session_id="new", workflows=True, root=False)
    args = launch.arguments(full)
    assert args[args.index("--permission-mode") + 1] == "bypassPermissions"
    assert "--allow-dangerously-skip-permissions" in args and args[-4:-2] == ["--session-id", "new"]
    assert args[-1] == '{"autoMemoryEnabled":true,"enableWorkflows":true,"ultracode":false}'
    as_root = launch.arguments(launch.Launch(permission_mode="bypassPermissions", root=True))
    assert as_root[as_root.index("--permission-mode") + 1] == "default"
    assert "--allow-dangerously-skip-permissions" not in as_root


def test_environment_layers() -> None:
    bridge = {"PATH": "/bin", "BB_PROVIDER_BRIDGE_RECORD_DIR": "/r", "NODE_OPTIONS": "x", "KEEP": "1", "HOME": "/h/"}
    env = launch.environment(bridge, {"PATH": "/thread/bin", "bad-name": "x", "GONE": "1"}, unset=["GONE", "KEEP"])
    assert env == {
        "PATH": "/thread/bin",
        "HOME": "/h/",
        "CLAUDE_CODE_ENTRYPOINT": "cli",
        "CLAUDE_AGENT_SDK_VERSION": "0.3.197",
    }
    fable = launch.environment({**bridge, "ANTHROPIC_API_KEY": "k"}, {}, model="claude-fable-5[1m]")
    assert fable["CLAUDE_CONFIG_DIR"] == "/h/.claude-fable" and "ANTHROPIC_API_KEY" not in fable
    with pytest.raises(launch.LaunchError, match="dedicated Claude account"):
        launch.environment({}, {}, model="fable")
    assert not launch.is_fable("best")


def test_executable_discovery(tmp_path: Path) -> None:
    claude = tmp_path / "bin" / "claude"
    claude.parent.mkdir()
    claude.write_text("#!/bin/sh\n")
    claude.chmod(0o755)
    assert launch.executable({"PATH": f":/nonexistent:{claude.parent}", "HOME": ""}) == str(claude)
    with pytest.raises(launch.LaunchError, match="must point to an executable"):
        launch.executable({launch.EXECUTABLE_ENV: f" {tmp_path}/missing "})
    assert launch.executable({launch.EXECUTABLE_ENV: str(claude)}) == str(claude)
    if (
        os.geteuid() != 0
        and not Path("/usr/local/bin/claude").exists()
        and not Path("/opt/homebrew/bin/claude").exists()
    ):
        with pytest.raises(launch.LaunchError, match="could not find the Claude Code CLI"):
            launch.executable({"PATH": "", "HOME": str(tmp_path)})
    assert launch.command("/x/fake.mjs", ["-a"]) == ["node", "/x/fake.mjs", "-a"]
    assert launch.command("/x/claude", []) == ["/x/claude"]
