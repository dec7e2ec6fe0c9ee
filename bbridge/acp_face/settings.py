"""`[acp]` in bbridge.toml: what `bbridge acp` starts a session with."""

from __future__ import annotations

from pathlib import Path

import msgspec

from bbridge.config_file import ConfigError, read_toml


class AcpSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    default_provider: str | None = None  # a new session's provider (else the daemon's first)


def read_settings(path: Path | None) -> AcpSettings:
    """The file's `[acp]` table; a `ConfigError` naming the key when it does not fit."""
    if path is None:
        return AcpSettings()
    table = read_toml(path).get("acp", {})
    try:
        return msgspec.convert(table, AcpSettings)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: acp: {exc} (known keys: default_provider)") from None
