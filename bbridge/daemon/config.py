"""Provider configuration (daemon.md §2): `bbridge.toml` plus the built-in echo provider."""

from __future__ import annotations

import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

import msgspec

ECHO_PROVIDER = "echo"


class ExtensionKind(msgspec.Struct, forbid_unknown_fields=True):
    """JSON Schemas for one extension kind's item payload and thread state payload."""

    item: dict[str, Any] | None = None
    state: dict[str, Any] | None = None


class ProviderConfig(msgspec.Struct, forbid_unknown_fields=True):
    command: list[str]
    cwd: str | None = None
    env_passthrough: list[str] = []
    env: dict[str, str] = {}
    turn_start_timeout_s: float = 120.0
    turn_start_sweep_s: float = 15.0
    turn_stall_timeout_s: float = 600.0
    extension_kinds: dict[str, ExtensionKind] = {}

    def __post_init__(self) -> None:
        if not self.command or not all(self.command):
            raise ValueError("command must be a non-empty list of non-empty strings")
        for name in ("turn_start_timeout_s", "turn_start_sweep_s", "turn_stall_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


class _ConfigFile(msgspec.Struct):
    providers: dict[str, ProviderConfig] = {}


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and the problem."""


def echo_provider() -> ProviderConfig:
    """The built-in canary: `bridges.echo`, with the extension kinds its `deltas:all` turn uses."""
    return ProviderConfig(
        command=[sys.executable, "-m", "bridges.echo"],
        extension_kinds={"echo/note": ExtensionKind(item={}), "echo/state": ExtensionKind(state={})},
    )


def command_from_string(text: str) -> list[str]:
    """Split a shell-style command line (as given to `--provider-cmd`)."""
    return shlex.split(text)


def load_providers(path: Path | None) -> dict[str, ProviderConfig]:
    """Providers from a TOML file (optional); `echo` is always present unless overridden."""
    providers = {ECHO_PROVIDER: echo_provider()}
    if path is None:
        return providers
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        parsed = msgspec.convert(raw, _ConfigFile)
    except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    providers.update(parsed.providers)
    return providers
