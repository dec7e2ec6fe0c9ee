"""JavaScript string semantics that reach the wire (spec Appendix B): trims, UTF-16 limits, JSON text."""

from __future__ import annotations

from typing import Any

import msgspec

from bbridge.core.grammar import js_float, utf16_len

_WHITESPACE = (
    "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
ELLIPSIS = "…"


def trim(text: str) -> str:
    """`String.prototype.trim`: Python's `strip()` set differs (U+001C–U+001F, U+0085)."""
    return text.strip(_WHITESPACE)


def limit(text: str, units: int) -> str:
    """Longer than `units` UTF-16 units → the first `units - 1` units and an ellipsis."""
    if utf16_len(text) <= units:
        return text
    data = text.encode("utf-16-le", "surrogatepass")[: (units - 1) * 2]
    return data.decode("utf-16-le", "surrogatepass") + ELLIPSIS


_decoder = msgspec.json.Decoder(float_hook=js_float)


def parse(line: str | bytes) -> Any:
    """`JSON.parse`: member order kept, integral doubles read as the integers JavaScript prints."""
    return _decoder.decode(line)


def stringify(value: Any) -> str:
    """`JSON.stringify` of a parsed value: compact, non-ASCII raw."""
    return msgspec.json.encode(value).decode()


def is_number(value: Any) -> bool:
    """`typeof value === "number"`: booleans are not numbers."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_str(value: Any) -> bool:
    return isinstance(value, str)
