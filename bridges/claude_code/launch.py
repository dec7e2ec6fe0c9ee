"""How a Claude Code child is started (spec §1.3–§1.5, §3.5): the executable, its command line, its environment.

Pure: `child.py` spawns what these functions choose, `session.py` decides when.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bbridge.core import js
from bridges.claude_code.dynamic_tools import TOOL_PREFIX

Json = Any
EXECUTABLE_ENV = "BB_CLAUDE_CODE_EXECUTABLE"
FABLE_CONFIG_ENV = "BB_CLAUDE_FABLE_CONFIG_DIR"
SDK_VERSION = "0.3.197"
MISSING_CLI = (
    "bb could not find the Claude Code CLI on this machine. Install Claude Code (https://claude.com/claude-code), "
    "or set BB_CLAUDE_CODE_EXECUTABLE to the full path of the claude binary, then restart bb."
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


def changed(spec: Launch, **changes: Any) -> Launch:
    """A copy of `spec` with `changes` (what a resume or a later turn's live settings change)."""
    return Launch(**{**{name: getattr(spec, name) for name in Launch.__slots__}, **changes})


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
