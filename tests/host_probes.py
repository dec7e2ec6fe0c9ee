"""What the Claude Code and codex maintenance tests build alike: fake executables on a temporary PATH, the answers'
defaults, and an address nothing listens on."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any


def script(path: Path, body: str) -> Path:
    """An executable Python script at `path` (a fake `claude`, `codex`, `npm` or `security`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


def health_answer(status: str, *, login_command: str, **members: Any) -> dict[str, Any]:
    """A `provider/health` answer in its wire order: nothing known but the status, unless `members` say so."""
    return {
        "status": status,
        "statusMessage": None,
        "accountEmail": None,
        "planLabel": None,
        "installedVersion": None,
        "minimumSupportedVersion": None,
        "canInstall": True,
        "canUpdate": status != "not_installed",
        "loginCommand": login_command,
        **members,
    }


def status_answer(executable: str, package: str, **members: Any) -> dict[str, Any]:
    """A `provider/installation/status` answer in its wire order: not installed, unless `members` say otherwise."""
    return {
        "executableName": executable,
        "executablePath": None,
        "installed": False,
        "installSource": "notInstalled",
        "currentVersion": None,
        "latestVersion": None,
        "minimumSupportedVersion": None,
        "npmPackageName": package,
        "npmGlobalPackageVersion": None,
        "installAction": None,
        "needsUpdate": False,
        "versionUnsupported": False,
        **members,
    }


def closed_port() -> int:
    """A loopback port that was just free: nothing listens there now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
