"""Filling a command template from a call's arguments, one argv element per template element.

A value is inserted literally into the element that names it: it never becomes a second element, and no shell
ever reads the result, so `x; rm -rf ~` or `$(id)` stay the strings they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import msgspec

PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_-]+)\}")


def fill(template: Sequence[str], *layers: Mapping[str, object]) -> list[str]:
    """The argv: each `{key}` from the first layer that has it (arguments, then defaults), else empty."""

    def value(match: re.Match[str]) -> str:
        for layer in layers:
            if match[1] in layer:
                return _text(layer[match[1]])
        return ""

    return [PLACEHOLDER.sub(value, element) for element in template]


def _text(value: object) -> str:
    """A string as it is; any other JSON value as its JSON text (`5`, `true`, `["a"]`), null as empty."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return msgspec.json.encode(value).decode()
