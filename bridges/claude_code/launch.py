"""The Claude Code CLI's side of the wire (spec §1.3–§1.5, §2, §3.5): launch, environment, stream-json lines.

Pure functions over plain JSON: what the bridge writes to a child and how it starts one. The session does the
I/O. Member orders follow the reference's SDK (bridge-originated control requests put `request_id` first).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bbridge.core import grammar as g
from bbridge.core import js

Json = Any
EXECUTABLE_ENV = "BB_CLAUDE_CODE_EXECUTABLE"
FABLE_CONFIG_ENV = "BB_CLAUDE_FABLE_CONFIG_DIR"
MCP_SERVER = "bb-bridge"
MCP_VERSION = "1.0.0"
MCP_PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
SDK_VERSION = "0.3.197"
TOOL_PREFIX = f"mcp__{MCP_SERVER}__"
MISSING_CLI = (
    "bb could not find the Claude Code CLI on this machine. Install Claude Code (https://claude.com/claude-code), "
    "or set BB_CLAUDE_CODE_EXECUTABLE to the full path of the claude binary, then restart bb."
)
HOOK_EVENTS = (
    "PermissionDenied",
    "PermissionRequest",
    "PostToolUse",
    "PostToolUseFailure",
    "PreToolUse",
    "SubagentStart",
    "SubagentStop",
)
SCRIPT_SUFFIXES = (".js", ".mjs", ".ts", ".tsx", ".jsx")
RUNTIME_ONLY_ENV = ("ELECTRON_RUN_AS_NODE", "BB_PROVIDER_BRIDGE_RECORD_DIR")
FABLE_UNSET = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLOUD_ML_REGION",
)
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$", re.IGNORECASE)
_EFFORTS = {"ultracode": "xhigh", "none": "low", "ultra": "max"}
SANDBOX = {
    "enabled": True,
    "failIfUnavailable": False,
    "autoAllowBashIfSandboxed": True,
    "allowUnsandboxedCommands": True,
    "network": {"allowLocalBinding": True},
}


class LaunchError(RuntimeError):
    """A child that cannot be started; the message is the runtime's `-32000` text."""


def encode(value: Json) -> bytes:
    """One line for the child as `JSON.stringify` writes it (§8.1; tool inputs go back verbatim), and its newline."""
    return (js.stringify(value) + "\n").encode()


def request_id() -> str:
    """A fresh id for a bridge-originated control request (13 base-36 characters, as the reference's)."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "".join(secrets.choice(alphabet) for _ in range(13))


# -- control lines (§2.2–§2.5) --------------------------------------------------------


def control_request(request_id: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"request_id": request_id, "type": "control_request", "request": body}


def control_success(request_id: str, body: Json) -> dict[str, Any]:
    return {"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": body}}


def control_error(request_id: str, text: str) -> dict[str, Any]:
    return {"type": "control_response", "response": {"subtype": "error", "request_id": request_id, "error": text}}


def initialize(*, mcp: bool, instructions: str, instruction_mode: str) -> dict[str, Any]:
    """The first request to every child: the seven hooks, the in-process MCP server, the system prompt."""
    hooks = {event: [{"hookCallbackIds": [f"hook_{i}"]}] for i, event in enumerate(HOOK_EVENTS)}
    body: dict[str, Any] = {"subtype": "initialize", "hooks": hooks}
    if mcp:
        body["sdkMcpServers"] = [MCP_SERVER]
    if instruction_mode == "replace":
        body["systemPrompt"] = [instructions]
    elif instructions:
        body["appendSystemPrompt"] = instructions
    return body


def hook_event(callback_id: Json) -> str | None:
    """The hook event a callback id was registered for."""
    match = re.fullmatch(r"hook_(\d+)", callback_id) if isinstance(callback_id, str) else None
    index = int(match.group(1)) if match else -1
    return HOOK_EVENTS[index] if 0 <= index < len(HOOK_EVENTS) else None


def user_line(text: str, session_id: str, uuid: str) -> dict[str, Any]:
    return {
        "type": "user",
        "message": {"role": "user", "content": text},
        "parent_tool_use_id": None,
        "session_id": session_id,
        "uuid": uuid,
    }


# -- the in-process MCP server (§2.6) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class DynamicTool:
    name: str
    description: str
    input_schema: Json
    presentation: g.Presentation | None = None  # the client's, shown on the tool's items (past the reference)


def mcp_reply(message: Json, tools: Sequence[DynamicTool]) -> dict[str, Any] | None:
    """The server's reply to an MCP message, or None for `tools/call` of a known tool (the runtime answers it)."""
    if not isinstance(message, dict) or "id" not in message:
        return {"jsonrpc": "2.0", "result": {}, "id": 0}
    method, ident = message.get("method"), message["id"]
    if method == "initialize":
        params = message.get("params")
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        version = asked if asked in MCP_PROTOCOL_VERSIONS else MCP_PROTOCOL_VERSIONS[0]
        info = {"name": MCP_SERVER, "version": MCP_VERSION}
        return {
            "result": {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info},
            "jsonrpc": "2.0",
            "id": ident,
        }
    if method == "tools/list":
        listed = [{"name": t.name, "description": t.description, "inputSchema": _schema(t.input_schema)} for t in tools]
        return {"result": {"tools": listed}, "jsonrpc": "2.0", "id": ident}
    if method == "tools/call":
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if any(t.name == name for t in tools):
            return None
        return mcp_result(ident, [{"type": "text", "text": f"Unknown tool: {name}"}], error=True)
    if method == "ping":
        return {"result": {}, "jsonrpc": "2.0", "id": ident}
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"Method not found: {method}"}}


def _schema(schema: Json) -> Json:
    return schema if isinstance(schema, dict) and schema.get("type") == "object" else {"type": "object"}


def mcp_result(ident: Json, content: list[dict[str, Any]], *, error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": content}
    if error:
        result["isError"] = True
    return {"result": result, "jsonrpc": "2.0", "id": ident}


def tool_call_content(result: Json) -> tuple[list[dict[str, Any]], bool]:
    """The runtime's `item/tool/call` result as MCP content, and whether it failed."""
    if not isinstance(result, dict) or not isinstance(result.get("success"), bool):
        return [{"type": "text", "text": "Invalid tool call response"}], True
    items = result.get("contentItems")
    if not isinstance(items, list):
        return [{"type": "text", "text": "Invalid tool call response"}], True
    content: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "inputText" and isinstance(item.get("text"), str) and item["text"]:
            content.append({"type": "text", "text": item["text"]})
        elif item.get("type") == "inputImage" and isinstance(item.get("imageUrl"), str):
            data_url = re.fullmatch(r"data:([^;,]+);base64,(.*)", item["imageUrl"], re.DOTALL)
            if data_url:
                content.append({"type": "image", "data": data_url.group(2), "mimeType": data_url.group(1)})
            else:
                content.append({"type": "text", "text": item["imageUrl"]})
    success = result["success"]
    if not content:
        content = [{"type": "text", "text": "OK" if success else "Tool call failed"}]
    return content, not success


# -- launching (§1.3–§1.5, §3.5) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Launch:
    """Everything a session child's command line depends on."""

    permission_mode: str  # Claude vocabulary
    model: str | None = None
    reasoning_level: str | None = None
    memory: bool = True
    workflows: bool = False
    resume: str | None = None
    session_id: str | None = None
    dynamic_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    sandbox: bool = False
    write_roots: tuple[str, ...] = ()
    plugin_dirs: tuple[str, ...] = ()
    root: bool = field(default_factory=lambda: os.geteuid() == 0)


def effort(level: str) -> str:
    return _EFFORTS.get(level, level)


def settings(launch: Launch) -> dict[str, Any]:
    """The flag-tier settings (`--settings`)."""
    value: dict[str, Any] = {
        "autoMemoryEnabled": launch.memory,
        "enableWorkflows": launch.workflows,
        "ultracode": launch.reasoning_level == "ultracode",
    }
    if launch.sandbox:
        value["sandbox"] = {
            **SANDBOX,
            **({"filesystem": {"allowWrite": list(launch.write_roots)}} if launch.write_roots else {}),
        }
    return value


def arguments(launch: Launch) -> list[str]:
    """The CLI flags, in the reference's order (§1.4)."""
    args = ["--output-format", "stream-json", "--verbose", "--input-format", "stream-json"]
    if launch.reasoning_level is not None:
        args += [
            "--thinking",
            "adaptive",
            "--thinking-display",
            "summarized",
            "--effort",
            effort(launch.reasoning_level),
        ]
    if launch.model:
        args += ["--model", launch.model]
    args += ["--permission-prompt-tool", "stdio"]
    if launch.resume is not None:
        args += ["--resume", launch.resume]
    if launch.dynamic_tools:
        args += ["--allowedTools", ",".join(TOOL_PREFIX + name for name in launch.dynamic_tools)]
    if launch.disallowed_tools:
        args += ["--disallowedTools", ",".join(launch.disallowed_tools)]
    args.append("--setting-sources=user,project,local")
    bypass = launch.permission_mode == "bypassPermissions"
    args += ["--permission-mode", "default" if bypass and launch.root else launch.permission_mode]
    if bypass and not launch.root:
        args.append("--allow-dangerously-skip-permissions")
    args.append("--include-partial-messages")
    if launch.sandbox:
        for root in launch.write_roots:
            args += ["--add-dir", root]
    for directory in launch.plugin_dirs:
        args += ["--plugin-dir", directory]
    if launch.session_id is not None:
        args += ["--session-id", launch.session_id]
    return [*args, "--settings", js.stringify(settings(launch))]


def is_fable(model: str | None) -> bool:
    if not model:
        return False
    bare = re.sub(r"\[[^\]]*\]$", "", model).lower()
    return bare == "fable" or bare.startswith("claude-fable-")


def environment(
    bridge_env: Mapping[str, str],
    overrides: Mapping[str, str],
    unset: Sequence[str] = (),
    model: str | None = None,
) -> dict[str, str]:
    """The session environment (§1.5): the bridge's, the thread's overrides, the account binding, the SDK's marks."""
    env = {k: v for k, v in bridge_env.items() if k not in RUNTIME_ONLY_ENV}
    binding, binding_unset = _account_binding(bridge_env, model)
    env.update({k: v for k, v in {**overrides, **binding}.items() if _ENV_NAME.match(k)})
    env["CLAUDE_CODE_ENTRYPOINT"] = "cli"
    for name in (*unset, *binding_unset, "CLAUDE_AGENT_SDK_CLIENT_APP", "NODE_OPTIONS", "DEBUG"):
        env.pop(name, None)
    env.setdefault("CLAUDE_AGENT_SDK_VERSION", SDK_VERSION)
    return env


def _account_binding(bridge_env: Mapping[str, str], model: str | None) -> tuple[dict[str, str], tuple[str, ...]]:
    """A Fable model runs on its own Claude account: its config directory, no API-key routes."""
    if not is_fable(model):
        return {}, ()
    directory = bridge_env.get(FABLE_CONFIG_ENV, "")
    home = bridge_env.get("HOME", "").rstrip("/")
    if not directory and home:
        directory = f"{home}/.claude-fable"
    if not directory:
        raise LaunchError(
            f'Model "{model}" requires a dedicated Claude account, but its config directory could not be resolved. '
            f"Set {FABLE_CONFIG_ENV} on the host daemon."
        )
    return {"CLAUDE_CONFIG_DIR": directory, "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1"}, FABLE_UNSET


def _runnable(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode) and os.access(path, os.X_OK)
    except OSError:
        return False


def executable(env: Mapping[str, str]) -> str:
    """The CLI to run (§1.3): the override, else `claude` on the session PATH, else the usual install places."""
    override = js.trim(env.get(EXECUTABLE_ENV, ""))
    if override:
        if not os.access(override, os.X_OK):
            raise LaunchError(f"{EXECUTABLE_ENV} must point to an executable Claude CLI path: {override}")
        return override
    for directory in env.get("PATH", "").split(":"):
        if directory and _runnable(os.path.join(directory, "claude")):
            return os.path.join(directory, "claude")
    if os.geteuid() != 0:
        home = js.trim(env.get("HOME", ""))
        places = [f"{home}/.local/bin/claude", f"{home}/.claude/local/claude"] if home else []
        for place in [*places, "/opt/homebrew/bin/claude", "/usr/local/bin/claude"]:
            if _runnable(place):
                return place
    raise LaunchError(MISSING_CLI)


def command(path: str, args: Sequence[str]) -> list[str]:
    """Scripts run under node (the replay harness's fake CLI is an `.mjs`)."""
    return ["node", path, *args] if path.endswith(SCRIPT_SUFFIXES) else [path, *args]
