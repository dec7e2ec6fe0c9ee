"""The ACP bridge (`python -m bridges.acp [--pass-env NAME]... -- AGENT_CMD ARGS...`), written with `bbridge.kit`.

It speaks the bb Provider Bridge Protocol 2 (grammar v3) upward and the Agent
Client Protocol version 1 downward, as the client of one agent process per
thread: `thread/start` runs `session/new`, `thread/resume` runs `session/load`
(or, when the agent does not advertise `loadSession`, a fresh `session/new`
announced by a `session/replaced` with `contextLost`), `thread/fork` runs
`session/fork`. The agent command comes from the command line, or per request
from `options.providerOptions.acpLaunchSpec` (`{command, args, env, cwd}`,
which wins). The agent's environment is an allowlist; `--pass-env NAME` adds
a variable of the bridge's own environment (an API key the agent needs).

Modules: `bridge` (the runtime methods, routed by the kit's typed handlers),
`session` (one thread's session: turns, control, settlement), `translate` (ACP
updates → deltas, pure) with `tool_shapes` (a tool call's item shape) and
`presentation` (its row), `child` (the agent process on the kit's `Child`:
launch, environment, JSON-RPC), `approvals` (the permission mode and
`session/request_permission` ↔ bb approvals), `prompt` (bb input → ACP prompt
blocks), `files` (the agent's `fs/*` requests), `messages` (the ACP subset the
bridge reads: constants and validators).
The thread's `bb-bridge` MCP server of declared dynamic tools is the kit's
(`bbridge.kit.mcp_host`, the bridge's end, and `bbridge/kit/mcp_relay.py`, the
stdio relay the agent launches).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bridges.acp.bridge import AcpBridge
from bridges.acp.child import Launch


def parse_args(argv: Sequence[str]) -> tuple[Launch | None, list[str]]:
    """The agent after `--` (optional) and the names to pass through."""
    argv = list(argv)
    agent = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        prog="python -m bridges.acp", description="The ACP bridge (protocol 2 up, ACP 1 down)."
    )
    parser.add_argument("--pass-env", action="append", default=[], metavar="NAME", help="pass this variable to agents")
    args = parser.parse_args(own)
    return (Launch(agent[0], tuple(agent[1:])) if agent else None), args.pass_env


def main(argv: Sequence[str] | None = None) -> None:
    default, passthrough = parse_args(sys.argv[1:] if argv is None else argv)
    AcpBridge(default, passthrough).bridge.run()
