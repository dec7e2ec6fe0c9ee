"""Reading `bbridge.toml`: the parse every reader of the file shares, and the error that says it cannot be used.

The daemon's providers (`bbridge.daemon.config`), the hosted tools (`bbridge.toolhost`), the agents' configuration
(`bbridge.agents`) and `bbridge acp`'s `[acp]` (`bbridge.acp_face.settings`) each read their own sections of one
file. The reader sits in a low layer, beside the wire, so the rooms above the daemon, which may not import its
internals, use the same one, and say what they refused alike (`Refusal`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and the problem."""


def read_toml(path: Path) -> dict[str, Any]:
    """The file parsed, or a `ConfigError` naming it and why it cannot be used."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to parse") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


class Refusal(msgspec.Struct, frozen=True):
    """One entry left out of the configuration; `key` is None when the whole section is unusable."""

    section: str
    key: str | None
    error: str

    def line(self) -> str:
        where = self.section if self.key is None else f"{self.section}.{self.key}"
        return f"{where}: {self.error}"


def schema_fault(schema: dict[str, Any], where: str = "") -> str | None:
    """Why `schema` is not a valid JSON Schema (draft 2020-12 unless it names another), or None."""
    import jsonschema  # here, not at the top: every `bbridge` command imports the CLI

    at = f" at {where}" if where else ""
    if not isinstance(schema.get("$schema", ""), str):
        return f"invalid JSON Schema{at}: $schema is not a string"  # validator_for would raise
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        return f"invalid JSON Schema{at}: {exc.message}"
    except RecursionError:
        return f"JSON Schema nested too deeply{at}"
    return None


class Refused(Exception):
    """A value a section's key reader does not take; the message is the reason (`read_keys` names the key)."""


def read_keys(
    table: Mapping[str, Any], readers: Mapping[str, Callable[[str, Any], Any]]
) -> tuple[dict[str, Any], list[str]]:
    """A table refused whole (`[perspectives]`, `[telemetry]`) read key by key: the values its readers made, and one
    `KEY: why` per key that is unknown or that its reader refused (`Refused`)."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in table.items():
        reader = readers.get(key)
        try:
            if reader is None:
                raise Refused(f"unknown key (known: {', '.join(readers)})")
            values[key] = reader(key, value)
        except Refused as exc:
            problems.append(f"{key}: {exc}")
    return values, problems
