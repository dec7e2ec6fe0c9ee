"""JavaScript string and JSON semantics the reference's output depends on (assembler.md §16, bridge specs §8).

The reference is a Node program: its trims, UTF-16 length limits and `JSON.stringify` differ from Python's in
small ways that reach the wire (titles, details, compact JSON of tool arguments), so the core and every bridge
mirror them with these helpers.
"""

from __future__ import annotations

import json
import math
import re
from json.encoder import encode_basestring
from typing import Any

import msgspec

from bbridge.core.scalars import js_float, utf16_len

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
MAX_SAFE_INTEGER = 2**53 - 1
_MAX_INDEX = 2**32 - 2  # the largest array index: such keys lead a JS object, in numeric order
_INDEX = re.compile(r"0|[1-9][0-9]{0,9}")
# What msgspec's fast parse cannot know about: integer literals that may exceed 2^53, and array-index keys
_NEEDS_JS = re.compile(rb'[0-9]{16}|"(?:0|[1-9][0-9]{0,9})"\s*:')
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _is_index(key: str) -> bool:
    return _INDEX.fullmatch(key) is not None and int(key) <= _MAX_INDEX


def _js_int(literal: str) -> Any:
    """An integer literal as a double: beyond 2^53 it rounds (and may print in exponent form)."""
    value = int(literal)
    return value if abs(value) <= MAX_SAFE_INTEGER else js_float(literal)


def _js_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JS object's member order: array-index keys first, ascending; a repeated key keeps its first place."""
    obj = dict(pairs)
    if not any(_is_index(key) for key in obj):
        return obj
    indices = sorted((key for key in obj if _is_index(key)), key=int)
    return {**{key: obj[key] for key in indices}, **{k: v for k, v in obj.items() if not _is_index(k)}}


def _js_value(value: Any) -> Any:
    """A msgspec-parsed value with JavaScript's integer rounding and member order."""
    if isinstance(value, dict):
        return _js_object([(key, _js_value(item)) for key, item in value.items()])
    if isinstance(value, list):
        return [_js_value(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
        return js_float(str(value))
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(text: str | bytes) -> Any:
    """`JSON.parse`: numbers are doubles (`1.0` reads as `1`, integers past 2^53 round), objects keep JavaScript's
    member order, strings may hold lone surrogates. Raises `msgspec.DecodeError` on what `JSON.parse` rejects.

    msgspec reads nearly every line; the rare ones it refuses (lone surrogates) take the standard library's parser.
    """
    try:
        value = _decoder.decode(text)
    except msgspec.DecodeError as exc:
        try:
            return json.loads(
                text,
                parse_float=js_float,
                parse_int=_js_int,
                parse_constant=_reject_constant,
                object_pairs_hook=_js_object,
            )
        except (ValueError, RecursionError):
            raise exc from None
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    return _js_value(value) if _NEEDS_JS.search(data) else value


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def quote(text: str) -> str:
    """A JSON string as `JSON.stringify` writes it: short escapes, other controls `\\u00xx`, lone surrogates
    `\\udxxx`, everything else raw."""
    quoted = encode_basestring(text)
    return quoted if quoted.isascii() else _LONE_SURROGATE.sub(_escape_surrogate, quoted)


def _double_text(value: float) -> str:
    """ECMAScript Number::toString of a finite double, from Python's shortest round-trip digits."""
    if value == 0:
        return "0"
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    significant = (whole + fraction).lstrip("0")
    n = len(whole) + int(exponent or 0) - (len(whole + fraction) - len(significant))  # value = 0.digits × 10^n
    digits = significant.rstrip("0")
    k = len(digits)
    sign = "-" if value < 0 else ""
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{sign}{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return f"{sign}0.{'0' * -n}{digits}"
    point = f"{digits[0]}.{digits[1:]}" if k > 1 else digits
    return f"{sign}{point}e{'+' if n > 0 else '-'}{abs(n - 1)}"


def _json_number(value: int | float) -> str:
    """A number inside JSON: a double as JavaScript prints it, non-finite values as `null`."""
    if isinstance(value, int):
        if abs(value) <= MAX_SAFE_INTEGER:
            return str(value)
        try:
            value = float(value)
        except OverflowError:
            return "null"
    return _double_text(value) if math.isfinite(value) else "null"


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(quote(value))
    elif value is None or value is True or value is False:
        out.append("null" if value is None else "true" if value else "false")
    elif isinstance(value, int | float):
        out.append(_json_number(value))
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            out.append(("," if i else "") + quote(key) + ":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif isinstance(value, msgspec.Raw):
        out.append(bytes(value).decode())
    else:
        raise TypeError(f"cannot stringify {type(value).__name__}")


def stringify(value: Any) -> str:
    """`JSON.stringify` of a parsed value: compact, non-ASCII raw, `/` unescaped, lone surrogates escaped,
    numbers printed as JavaScript prints doubles (`1e+21`, `1e-7`)."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def is_number(value: Any) -> bool:
    """A JSON number (`typeof value === "number"`), never a boolean."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_str(value: Any) -> bool:
    """`typeof value === "string"`."""
    return isinstance(value, str)


def number_text(value: int | float) -> str:
    """`String(value)`: a number as JavaScript prints it inside a template string."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    return _json_number(value)
