"""Typed reads of codex's JSON with its schema's rules: a violation raises `ShapeError`.

The reference validates each notification against codex's schema; a violation turns the whole
notification into an `unhandled` delta (spec §3.3, §3.8), so every reader here either returns a typed
value or raises.
"""

from __future__ import annotations

from typing import Any

from bbridge.core import js


class ShapeError(ValueError):
    """JSON codex's schema does not allow."""


def need(condition: bool) -> None:
    if not condition:
        raise ShapeError


def obj(value: Any) -> dict[str, Any]:
    need(isinstance(value, dict))
    result: dict[str, Any] = value
    return result


def text(container: dict[str, Any], name: str) -> str:
    value = container.get(name)
    need(isinstance(value, str))
    return str(value)


def optional_text(container: dict[str, Any], name: str) -> str | None:
    """A string that may be absent or null."""
    value = container.get(name)
    need(value is None or isinstance(value, str))
    return None if value is None else str(value)


def strings(value: Any) -> list[str]:
    need(isinstance(value, list) and all(isinstance(entry, str) for entry in value))
    result: list[str] = value
    return result


def nullable_number(container: dict[str, Any], name: str) -> Any:
    """A required key holding a number or null."""
    value = container.get(name)
    need(name in container and (value is None or js.is_number(value)))
    return value


def number(container: dict[str, Any], name: str) -> Any:
    value = container.get(name)
    need(js.is_number(value))
    return value
