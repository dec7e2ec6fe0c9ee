"""Provider configuration (daemon.md §2): `bbridge.toml` plus the built-in echo provider.

A file that cannot be read or parsed is fatal: nothing in it can be trusted. A broken entry in a
readable file only costs that entry: it is refused (section, key, why) and every other provider serves.
"""

from __future__ import annotations

import math
import re
import shlex
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from bbridge.config_file import ConfigError, read_toml, schema_fault
from bbridge.config_file import Refusal as Refusal  # its home is the shared reader; named here for its users

ECHO_PROVIDER = "echo"
DEFAULT_PATH = Path("bbridge.toml")


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
    interaction_timeout_s: float = 300.0  # a pending request with no client connected, then the policy answers
    stop_grace_s: float = 5.0  # a stopped bridge's SIGTERM to SIGKILL of its group (protocol.md §9.4)
    idle_release_s: float = 1800.0  # a thread idle this long is released (protocol.md §4.7; `idle.py`); 0: never
    bridge_idle_exit_s: float = 0.0  # a bridge with no live thread this long is stopped; 0: never
    prestart: bool = False  # spawned and handshaken at the daemon's start, not at the first request
    extension_kinds: dict[str, ExtensionKind] = {}

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            problem = check(getattr(self, name))
            if problem is not None:
                raise ValueError(f"{name}: {problem}")


class ConfigReport(msgspec.Struct):
    """What `daemon/status` says under `config`: the file read (None: none) and what of it was refused."""

    path: str | None = None
    refused: list[Refusal] = []


class LoadedConfig(NamedTuple):
    """What `bbridge serve` needs from the file: the providers to serve and the report for `daemon/status`."""

    providers: dict[str, ProviderConfig]
    report: ConfigReport


class _Refused(Exception):
    """A key's value that does not fit; the message is the refusal's `error`."""


def echo_provider() -> ProviderConfig:
    """The built-in canary: `bridges.echo`, with the extension kinds its `deltas:all` turn uses."""
    return ProviderConfig(
        command=[sys.executable, "-m", "bridges.echo"],
        extension_kinds={"echo/note": ExtensionKind(item={}), "echo/state": ExtensionKind(state={})},
    )


def command_from_string(text: str) -> list[str]:
    """Split a shell-style command line (as given to `--provider-cmd`)."""
    return shlex.split(text)


def config_path(given: Path | None) -> Path | None:
    """The `--config` file, else `./bbridge.toml` when present, else none."""
    if given is None and DEFAULT_PATH.exists():
        return DEFAULT_PATH
    return given


# The file's top-level sections: `providers` is read here, the rest by `bbridge.toolhost` (hosted tools: `tools`,
# `tool_rules`, `tool_audit`, `mcp_servers`), `bbridge.agents` (`agents`, `skills`: the agents' configuration) and
# `bbridge.acp_face` (`acp`: `bbridge acp`'s defaults) and `bbridge.perspectives` (`perspectives`: the panel tools),
# `usage_config` (`pricing`, `budgets`: what tokens cost and the limits on them).
KNOWN_SECTIONS = frozenset(
    {"providers", "tools", "tool_rules", "tool_audit", "mcp_servers", "agents", "skills", "acp", "perspectives"}
    | {"telemetry"}  # `bbridge.telemetry`: where the daemon's spans go
    | {"pricing", "budgets"}
)


def load_config(path: Path | None) -> LoadedConfig:
    """Providers from a TOML file (optional) and what was refused; `echo` is always present.

    A broken `[providers.echo]` is refused like any other, and the built-in echo stays.
    """
    providers = {ECHO_PROVIDER: echo_provider()}
    if path is None:
        return LoadedConfig(providers, ConfigReport())
    raw = read_toml(path)
    tables = raw.get("providers", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: providers: expected a table, got {_a(_toml_type(tables))}")
    refused = [
        Refusal(name, None, "unknown section (providers go in [providers.NAME])")
        for name in raw
        if name not in KNOWN_SECTIONS
    ]
    for name, table in tables.items():
        provider, problems = _provider(f"providers.{name}", table)
        refused.extend(problems)
        if provider is not None:
            providers[name] = provider
    return LoadedConfig(providers, ConfigReport(str(path.absolute()), refused))


def warn_refused(report: ConfigReport) -> None:
    """One warning per refused entry, so whoever starts the daemon sees what it will not serve."""
    import structlog  # here, not at the top: every `bbridge` command imports this module

    log = structlog.get_logger("bbridge.daemon.config")
    for refusal in report.refused:
        log.warning(
            "config entry refused", path=report.path, section=refusal.section, key=refusal.key, error=refusal.error
        )


# -- one provider section ------------------------------------------------------

_FIELDS = {field.name: field for field in msgspec.structs.fields(ProviderConfig)}
_REQUIRED = [name for name, field in _FIELDS.items() if field.required]


def _provider(section: str, table: Any) -> tuple[ProviderConfig | None, list[Refusal]]:
    """The section's provider, or None and one refusal per bad key (all of them, not just the first)."""
    if not isinstance(table, dict):
        return None, [Refusal(section, None, f"expected a table, got {_a(_toml_type(table))}")]
    values: dict[str, Any] = {}
    refused = [Refusal(section, name, "missing (required)") for name in _REQUIRED if name not in table]
    for key, value in table.items():
        field = _FIELDS.get(key)
        try:
            if field is None:
                raise _Refused(f"unknown key (known: {', '.join(_FIELDS)})")
            values[key] = _convert(value, field.type, "")
            problem = _CHECKS[key](values[key]) if key in _CHECKS else None
            if problem is not None:
                raise _Refused(problem)
        except _Refused as exc:
            refused.append(Refusal(section, key, str(exc)))
    if refused:
        return None, refused
    return ProviderConfig(**values), []


def _convert(value: Any, type_: Any, where: str) -> Any:
    """`value` as `type_`; a table is converted entry by entry so that an error names the entry."""
    if typing.get_origin(type_) is dict and isinstance(value, dict):
        _, entry_type = typing.get_args(type_)
        return {key: _convert(entry, entry_type, f"{where}.{_toml_key(key)}") for key, entry in value.items()}
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as exc:
        raise _Refused(_phrase(str(exc), where)) from None


# msgspec's "Expected `float`, got `str` - at `$[1]`", said in TOML's words
_MISMATCH = re.compile(r"Expected `(?P<expected>[^`]+)`, got `(?P<got>[^`]+)`(?: - at `\$(?P<at>[^`]*)`)?$")
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<field>[^`]+)`(?: - at `\$(?P<at>[^`]*)`)?$")
_TYPE_NAMES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "array": "array",
    "object": "table",
    "datetime": "date-time",
    "date": "date",
    "time": "time",
}


def _phrase(message: str, where: str) -> str:
    """msgspec's message in TOML's words (table, array, number), located at `where` plus msgspec's own path."""
    if match := _MISMATCH.match(message):
        expected = " or ".join(
            _a(_TYPE_NAMES.get(name, name)) for name in match["expected"].split(" | ") if name != "null"
        )
        got = _a(_TYPE_NAMES.get(match["got"], match["got"]))
        return _at(f"expected {expected}, got {got}", where + (match["at"] or ""))
    if match := _UNKNOWN.match(message):
        return _at(f"unknown key {match['field']!r}", where + (match["at"] or ""))
    return _at(message, where)


def _at(text: str, where: str) -> str:
    return f"{text} at {where.lstrip('.')}" if where else text


def _a(name: str) -> str:
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    return {str: "string", int: "integer", float: "number", list: "array", dict: "table"}.get(
        type(value), type(value).__name__
    )


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else msgspec.json.encode(key).decode()


# -- value rules, shared by the loader (per key) and ProviderConfig itself ------


def _check_command(command: list[str]) -> str | None:
    if not command or not all(command):
        return "expected a non-empty array of non-empty strings"
    return None


def _check_seconds(value: float) -> str | None:
    if not math.isfinite(value) or value <= 0:
        return f"expected a positive, finite number of seconds, got {value}"
    return None


def _check_off_or_seconds(value: float) -> str | None:
    if not math.isfinite(value) or value < 0:
        return f"expected 0 (off) or a positive, finite number of seconds, got {value}"
    return None


def _check_extension_kinds(kinds: dict[str, ExtensionKind]) -> str | None:
    """Schemas are checked here so that a bad one refuses its provider instead of the daemon's start."""

    for kind, schemas in kinds.items():
        for slot, schema in (("item", schemas.item), ("state", schemas.state)):
            if schema is None:
                continue
            if (fault := schema_fault(schema, f"{_toml_key(kind)}.{slot}")) is not None:
                return fault
    return None


_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "command": _check_command,
    "turn_start_timeout_s": _check_seconds,
    "turn_start_sweep_s": _check_seconds,
    "stop_grace_s": _check_seconds,
    "turn_stall_timeout_s": _check_seconds,
    "interaction_timeout_s": _check_seconds,
    "idle_release_s": _check_off_or_seconds,
    "bridge_idle_exit_s": _check_off_or_seconds,
    "extension_kinds": _check_extension_kinds,
}
