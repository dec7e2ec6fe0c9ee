"""The `[tools.NAME]` tables of `bbridge.toml`, and the tool every source is loaded into.

A broken table only costs that tool: it is refused (section, key, why) like a refused provider entry, and every
other tool is kept.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec

from bbridge.config_file import Refusal, schema_fault
from bbridge.toolhost.argv import fill

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # bb's rule for a tool's name
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Policy = Literal["allow", "ask", "deny"]


class Label(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pending: str
    completed: str


class Icon(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    glyph: str


class Presentation(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """bb's AgentToolPresentation: what a timeline shows while the tool runs and once it has."""

    label: Label | None = None
    icon: Icon | None = None
    intent: Literal["generic", "terminal", "diff", "search", "read", "list", "web", "image"] | None = None


class Retry(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    on_error: bool = False
    on_empty: bool = False
    max_attempts: int = 1
    param_fallbacks: dict[str, list[str]] = {}  # bundles only: alternative values tried in turn


def no_parameters() -> dict[str, Any]:
    """The schema of a tool declared without one: it takes no arguments."""
    return {"type": "object", "properties": {}}


class HostedTool(msgspec.Struct, frozen=True, kw_only=True):
    """One tool as an agent will see it, and how it would be run; `source` says where it was declared."""

    name: str
    source: str
    description: str
    command: list[str]  # the argv template: one element per argv element
    schema: dict[str, Any] = msgspec.field(default_factory=no_parameters)
    defaults: dict[str, str] = {}
    bound: dict[str, str] = {}  # `{entry}` and `{dir}` of a bundle: ahead of the arguments
    policy: Policy = "ask"
    timeout_s: float = 60.0
    max_output_bytes: int = 1_048_576
    env: list[str] = []
    presentation: Presentation | None = None
    retry: Retry = Retry()

    def argv(self, arguments: Mapping[str, object]) -> list[str]:
        return fill(self.command, self.bound, arguments, self.defaults)


# The keys a `[tools.NAME]` table may hold: the tool's own, less what the loader sets
_FIELDS = {f.name: f for f in msgspec.structs.fields(HostedTool) if f.name not in ("name", "source", "bound")}


def declared_tools(tables: Any, source: str) -> tuple[list[HostedTool], list[Refusal]]:
    """The tools of the `tools` table (`source`: the file), and one refusal per bad key of each broken one."""
    good, refused = named_tables(tables, "tools", _bad_name, _FIELDS, _CHECKS)
    return [HostedTool(name=name, source=f"{source} [{section}]", **values) for name, section, values in good], refused


def _bad_name(name: str) -> str | None:
    return None if NAME.fullmatch(name) else "bad tool name (expected 1 to 64 of A-Z a-z 0-9 _ -)"


def named_tables(
    tables: Any,
    kind: str,
    bad_name: Callable[[str], str | None],
    fields: Mapping[str, msgspec.structs.FieldInfo],
    checks: Mapping[str, Any],
) -> tuple[list[tuple[str, str, dict[str, Any]]], list[Refusal]]:
    """Each sound `[KIND.NAME]` table as (name, section, its values), and the refusals of the others."""
    good: list[tuple[str, str, dict[str, Any]]] = []
    refused: list[Refusal] = []
    for name, table in tables.items():
        section = f"{kind}.{name}"
        problem = bad_name(name) or (
            None if isinstance(table, dict) else f"expected a table, got {type(table).__name__}"
        )
        if problem is not None:
            refused.append(Refusal(section, None, problem))
            continue
        values, problems = _values(section, table, fields, checks)
        refused.extend(problems)
        if not problems:
            good.append((name, section, values))
    return good, refused


def _values(
    section: str, table: dict[str, Any], fields: Mapping[str, msgspec.structs.FieldInfo], checks: Mapping[str, Any]
) -> tuple[dict[str, Any], list[Refusal]]:
    """A TOML table's values converted to `fields`' types and passed through `checks`, or a refusal per bad key."""
    values: dict[str, Any] = {}
    refused = [
        Refusal(section, key, "missing (required)") for key, f in fields.items() if f.required and key not in table
    ]
    for key, value in table.items():
        field = fields.get(key)
        if field is None:
            refused.append(Refusal(section, key, f"unknown key (known: {', '.join(fields)})"))
            continue
        try:
            values[key] = msgspec.convert(value, field.type)
        except msgspec.ValidationError as exc:
            refused.append(Refusal(section, key, str(exc)))
            continue
        problem = checks[key](values[key]) if key in checks else None
        if problem is not None:
            refused.append(Refusal(section, key, problem))
    return values, refused


def check_command(command: list[str]) -> str | None:
    if not command or not all(command):
        return "expected a non-empty array of non-empty strings"
    return None


def check_schema(schema: dict[str, Any]) -> str | None:
    """A tool's parameters: an object schema that jsonschema's meta-schema accepts (checked once, at load)."""
    if schema.get("type") != "object":
        return 'expected an object schema (type = "object")'
    return schema_fault(schema)


def check_retry(retry: Retry) -> str | None:
    if retry.max_attempts < 1:
        return f"max_attempts: expected at least 1, got {retry.max_attempts}"
    return None


def check_seconds(value: float) -> str | None:
    if not math.isfinite(value) or value <= 0:
        return f"expected a positive, finite number of seconds, got {value}"
    return None


def _check_bytes(value: int) -> str | None:
    return None if value > 0 else f"expected a positive number of bytes, got {value}"


def check_env(names: list[str]) -> str | None:
    bad = [name for name in names if not _ENV_NAME.fullmatch(name)]
    return f"not variable names: {', '.join(map(repr, bad))}" if bad else None


_CHECKS: dict[str, Any] = {
    "command": check_command,
    "schema": check_schema,
    "timeout_s": check_seconds,
    "max_output_bytes": _check_bytes,
    "env": check_env,
    "retry": check_retry,
}
