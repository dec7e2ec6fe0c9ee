"""JavaScript string and JSON semantics the reference's output depends on (assembler.md §16, bridge specs §8).

The reference is a Node program: its trims, UTF-16 length limits and `JSON.stringify` differ from Python's in
small ways that reach the wire (titles, details, compact JSON of tool arguments), so the core and every bridge
mirror them with these helpers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from bbridge.core.grammar import js_float, utf16_len

# ECMAScript WhiteSpace and LineTerminator: what `trim()` removes (Python's `strip()` set differs:
# U+001C–U+001F and U+0085 are whitespace to Python only).
WHITESPACE = (
    "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
ELLIPSIS = "…"


def trim(text: str) -> str:
    """`String.prototype.trim`."""
    return text.strip(WHITESPACE)


def trim_end(text: str) -> str:
    """`String.prototype.trimEnd`."""
    return text.rstrip(WHITESPACE)


def cut(text: str, units: int) -> str:
    """The first `units` UTF-16 code units; a cut inside a surrogate pair keeps the lone high surrogate."""
    if text.isascii() or utf16_len(text) <= units:
        return text[:units]
    data = text.encode("utf-16-le", "surrogatepass")[: units * 2]
    return data.decode("utf-16-le", "surrogatepass")


def limit(text: str, units: int) -> str:
    """Longer than `units` UTF-16 units → the first `units - 1` units and an ellipsis (titles, details)."""
    return text if utf16_len(text) <= units else cut(text, units - 1) + ELLIPSIS


_decoder = msgspec.json.Decoder(float_hook=js_float)


def parse(line: str | bytes) -> Any:
    """`JSON.parse`: member order kept, integral doubles (`1.0`) read as the integers JavaScript prints."""
    return _decoder.decode(line)


def stringify(value: Any) -> str:
    """`JSON.stringify` of a parsed value: compact, non-ASCII raw, `/` unescaped."""
    return msgspec.json.encode(value).decode()


def is_number(value: Any) -> bool:
    """A JSON number (`typeof value === "number"`), never a boolean."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_str(value: Any) -> bool:
    """`typeof value === "string"`."""
    return isinstance(value, str)


def number_text(value: int | float) -> str:
    """A number as JavaScript prints it inside a template string (integral doubles without a point)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return stringify(value)
