"""How an app-server child is launched (spec §1.3, §1.5): its command line, environment and `initialize`.

Pure: the argv and environment come from the bridge's own environment (the replay seam
`BB_CODEX_BRIDGE_APP_SERVER_*`); how the child's lines are framed is `child`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

COMMAND_ENV = "BB_CODEX_BRIDGE_APP_SERVER_COMMAND"
ARGS_ENV = "BB_CODEX_BRIDGE_APP_SERVER_ARGS"
DEFAULT_ARGS = ("app-server",)
DEFAULT_ARGV = ("codex", *DEFAULT_ARGS)
DROPPED_ENV = frozenset({"NODE_ENV", "ELECTRON_RUN_AS_NODE"})
INITIALIZE_PARAMS = {
    "clientInfo": {"name": "bb", "version": "1.0.0", "title": None},
    "capabilities": {"experimentalApi": True},
}


class LaunchError(ValueError):
    """`BB_CODEX_BRIDGE_APP_SERVER_ARGS` is not a JSON array of strings: a hard error at launch."""


def argv(environ: Mapping[str, str]) -> list[str]:
    """Spec §1.3, but a command without `ARGS` runs as `COMMAND app-server` (the spec: bare `COMMAND`, which
    makes a pinned codex binary start its interactive TUI and die on `stdin is not a terminal`); `ARGS='[]'`
    runs it bare."""
    command = environ.get(COMMAND_ENV, "")
    if not command:
        return list(DEFAULT_ARGV)
    raw = environ.get(ARGS_ENV, "")
    if not raw:
        return [command, *DEFAULT_ARGS]
    try:
        args = json.loads(raw)
    except ValueError:
        args = None
    if not (isinstance(args, list) and all(isinstance(arg, str) for arg in args)):
        raise LaunchError(f"{ARGS_ENV} must be a JSON array of strings")
    return [command, *args]


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The bridge's environment without bb's own variables, which codex must not inherit."""
    return {
        name: value
        for name, value in environ.items()
        if value and not name.startswith("BB_") and name not in DROPPED_ENV
    }
