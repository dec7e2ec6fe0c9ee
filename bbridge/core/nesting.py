"""The nesting bound on JSON from outside (RELIABILITY.md): deeper input is refused before it is decoded.

msgspec decodes recursively and raises `RecursionError` somewhere near
Python's recursion limit (1000 frames, less whatever the stack already holds),
so an unchecked line nested ~1,000 levels deep could end the process, and a
line that decoded at one stack depth could fail at another. Every reader of
outside bytes (client and bridge lines, journal files, recordings) asks
`too_deep` first, so everything admitted nests at most `MAX_JSON_DEPTH` levels
and decodes anywhere. Protocol messages nest a few dozen levels at most.

The check costs nothing on a line of at most `MAX_JSON_DEPTH` bytes (each level takes
at least one byte) and two `bytes.count` calls on a longer one: only a line with
more than `MAX_JSON_DEPTH` brackets is measured exactly, with string literals
(whose brackets do not nest) cut out by one regex pass.
"""

from __future__ import annotations

import itertools
import re

MAX_JSON_DEPTH = 256

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def too_deep(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text nests arrays and objects more than `limit` levels deep."""
    if len(data) <= limit:  # each level takes a byte: most protocol lines end here, without a scan
        return False
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    return depth(data) > limit


def depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (an unterminated string ends the count)."""
    skeleton = _STRING.sub(b"", data)
    quote = skeleton.find(b'"')
    if quote >= 0:
        skeleton = skeleton[:quote]
    brackets = skeleton.translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)
