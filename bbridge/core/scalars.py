"""The grammar's scalar types and its `Wire` base, with the rules msgspec's constraints do not express.

`grammar` (the delta kinds) and `shapes` (the item shapes) are built from these. Two rules run in Python:
numbers as JavaScript holds them (`js_numbers`, `js_float`: the reference's `JSON.stringify` writes an
integral double as an integer) with lengths in UTF-16 code units (`utf16_len`), and the key-part rule, no
U+001F in a key part, which every decoding entry point checks (`key_part_fault`) where the text can hold it.
"""

from __future__ import annotations

import functools
import math
import re
import typing
from typing import Annotated, Any, Literal, TypeAlias

from msgspec import Meta, Raw, Struct

SEP = "\x1f"
MAX_SAFE = 2**53 - 1

# A key part is non-empty and holds no U+001F (the key separator). msgspec checks the length; the U+001F rule is
# no msgspec `pattern`, whose check on every string costs a large share of decoding a whole delta line. Every
# decoding entry point runs it (`key_part_fault`) where U+001F can be: JSON text holds it only through a
# `\u001f` escape (msgspec refuses raw control characters), which `ESCAPED_SEPARATOR` finds in one scan.
KEY_PART_PATTERN = r"^[^\x1f]+\Z"
ESCAPED_SEPARATOR = re.compile(rb"\\u001[fF]")
_KEY_PART = Meta(min_length=1, extra_json_schema={"pattern": KEY_PART_PATTERN})
KeyPart = Annotated[str, _KEY_PART]
NonEmpty = Annotated[str, Meta(min_length=1)]
ClientRequestId = Annotated[str, Meta(pattern=r"^creq_[23456789abcdefghijkmnpqrstuvwxyz]{10}\Z")]
ExtensionKind = Annotated[str, Meta(pattern=r"^[a-z0-9-]+/[a-z0-9-]+\Z")]
SafeInt = Annotated[int, Meta(ge=-MAX_SAFE, le=MAX_SAFE)]
PosInt = Annotated[int, Meta(gt=0, le=MAX_SAFE)]
Number: TypeAlias = int | float

TextChannel = Literal["agentMessage", "reasoningSummary", "reasoningText", "plan"]
OutputChannel = Literal["command", "fileChange"]
ItemStatus = Literal["pending", "completed", "failed", "interrupted"]
TurnStatus = Literal["completed", "failed", "interrupted"]
Attach = Literal["open", "currentOrLast"]
LimitStatus = Literal["allowed", "warning", "blocked", "unknown"]
ErrorCategory = Literal[
    "active-turn-not-steerable", "bad-request", "connection-failed", "context-window-exceeded",
    "billing", "budget-exceeded", "internal", "max-output-tokens", "max-turns", "overloaded",
    "policy", "rate-limit", "sandbox", "stream-disconnected", "structured-output-retries",
    "thread-rollback-failed", "too-many-failed-attempts", "unauthorized", "unknown",
]  # fmt: skip


def js_numbers(obj: Struct, names: tuple[str, ...]) -> None:
    """Numbers as JavaScript holds them: non-finite values are invalid, integral ones are integers.

    A double like `1.0` or `-0.0` is the integer 1 or 0 to the reference (`JSON.stringify` writes `1`,
    `0`); storing it as an int makes the encoder write the same bytes. A `__post_init__` calls this only
    once one of its fields holds a float: most numbers arrive as integers, and testing the fields' types
    costs a fraction of this loop.
    """
    for name in names:
        value = getattr(obj, name)
        if type(value) is float:
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number")
            if value.is_integer() and abs(value) < 1e21:
                setattr(obj, name, int(value))


def js_float(literal: str) -> Any:
    """`float_hook` for opaque JSON: integral doubles become ints, as `JSON.parse` + `JSON.stringify` would."""
    value = float(literal)
    return int(value) if value.is_integer() and abs(value) < 1e21 else value


class Wire(Struct, kw_only=True, gc=False):
    """Base of every wire object: keyword-only so schema order can mix optional and required."""


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit the reference's limits are measured in."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def escaped_separator(data: bytes | Raw) -> re.Match[bytes] | None:
    """`ESCAPED_SEPARATOR.search`, after substring tests on bytes: `in` scans faster than the regex engine steps
    byte by byte, and almost no text holds `\\u001`. A backslash is looked for first: a one-byte `in` is a
    `memchr`, far cheaper than the five-byte search, and a text with no escape at all is common. Other buffers
    (`msgspec.Raw`) go to the regex."""
    if type(data) is bytes and (b"\\" not in data or b"\\u001" not in data):
        return None
    return ESCAPED_SEPARATOR.search(data)


def may_hold_separator(text: bytes | str) -> bool:
    """Whether values decoded from this JSON text can hold U+001F: only through a `\\u001f` escape."""
    return escaped_separator(text.encode() if isinstance(text, str) else text) is not None


def key_part_fault(value: Struct, path: str = "$") -> str | None:
    """msgspec's message for the first key part in `value` holding U+001F (what the pattern would say), or None."""
    for name, is_key_part in _key_part_fields(type(value)):
        field = getattr(value, name)
        if is_key_part:
            if type(field) is str and SEP in field:
                return f"Expected `str` matching regex {KEY_PART_PATTERN!r} - at `{path}.{name}`"
            continue
        nested = enumerate(field) if isinstance(field, list) else ((None, field),)
        for index, item in nested:
            if isinstance(item, Struct):
                where = f"{path}.{name}" if index is None else f"{path}.{name}[{index}]"
                fault = key_part_fault(item, where)
                if fault is not None:
                    return fault
    return None


@functools.cache
def _key_part_fields(kind: type) -> tuple[tuple[str, bool], ...]:
    """A Struct type's fields that are key parts (True) or may hold Structs with key parts (False)."""
    hints = typing.get_type_hints(kind, include_extras=True)
    fields: list[tuple[str, bool]] = []
    for name in getattr(kind, "__struct_fields__", ()):
        if _holds_key_part(hints[name], set()):
            fields.append((name, _is_key_part(hints[name])))
    return tuple(fields)


def _is_key_part(annotation: Any) -> bool:
    """`KeyPart` itself, or `KeyPart | UNSET`."""
    if typing.get_origin(annotation) is Annotated:
        return _KEY_PART in annotation.__metadata__
    return any(_is_key_part(arg) for arg in typing.get_args(annotation) if typing.get_origin(arg) is Annotated)


def _holds_key_part(annotation: Any, seen: set[type]) -> bool:
    if _is_key_part(annotation):
        return True
    if isinstance(annotation, type) and issubclass(annotation, Struct):
        if annotation in seen:
            return False
        seen.add(annotation)
        hints = typing.get_type_hints(annotation, include_extras=True)
        return any(_holds_key_part(hints[name], seen) for name in annotation.__struct_fields__)
    return any(_holds_key_part(arg, seen) for arg in typing.get_args(annotation))
