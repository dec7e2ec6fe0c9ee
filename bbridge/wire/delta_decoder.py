"""Decoding a `thread/delta` line: the one place that says how, and why each fast path exists.

The rules are the grammar's (`core/grammar.py`): decoding into its Structs *is* validation, and
`grammar.decode_params` is the reference every path here must agree with (`tests/test_bench.py` checks each
bench line, an integral float and a U+001F key part, and `tests/test_rpc_reads.py` the framing passes). The daemon
reads a bridge's lines through `DELTA_LINES`, a `TypedDecoder`:

* **A whole read in one call** (`TypedDecoder.read`, which `rpc.Connection` tries first for each read): when
  every line of a read is a typed notification, the lines are joined as one JSON array and decoded by one
  msgspec call (`many`) into whole messages with typed params. A streaming bridge's read mostly is such a
  read; one call per read instead of one per line took the scale bench's 25-line reads from 1.85 to 1.58 µs
  per line (BENCHMARKS.md). Each line's depth is checked as the line path does (measuring the joined array's
  depth halved the daemon bench's throughput). A read of one line goes the line path: looking for its
  method's tag first cost more than that path's classification (callgrind: 15.8k instructions against 12.8k).
* **A line in one pass** (`TypedDecoder.one`, tried by `peer.Inbound.receive` for each line of any other
  read, inline in its loop: a call per line more would cost what the pass saves): the whole message, `method`
  the tag, decoded once into the grammar's types instead of an envelope and then its params (the bench's
  figure: 0.60 → 0.69 of the yardstick). What does not decode so, another message or invalid params, takes the
  envelope path unchanged, and the params reach `grammar.decode_params` in the daemon's delivery.
* **The float hook** (`scalars.js_float`): an integral double in an opaque payload becomes an integer, as
  `grammar.decode_params` makes it; without it the typed pass wrote `1.0` where the reference writes `1`.
* **The U+001F screen** (`scalars.escaped_separator`): a key part holds no U+001F, a rule msgspec would check
  with a `pattern` that cost a third of a line's decode. A decoded string holds U+001F only through a `\\u001f`
  escape, so a line (or read) holding one skips the typed passes; `grammar.decode_params` then checks its key
  parts (`key_part_fault`).

Elsewhere the grammar's own entry point decodes params: the kit validates each batch a bridge emits with
`grammar.decode_params` before writing it, and the replay tooling (`replay/cells.py`) decodes a recorded
line's envelope, then its params (two passes; parity, not speed, is what it is for). `decode_line` is the
daemon's path for one line, for the bench's core phase.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import msgspec
from msgspec import UNSET

from bbridge.core import grammar, scalars
from bbridge.core.nesting import MAX_JSON_DEPTH, too_deep
from bbridge.wire.framing import Overflow
from bbridge.wire.jsonrpc import ID_TYPES, Notification, decode_envelope


class TypedDecoder:
    """Decoders for whole messages of the given notification methods, tagged on `method`, params typed: `one` for a
    line, `many` for a read's lines joined as one JSON array.

    `screen`: a line (or read) for which it returns anything but None is not decoded here; it takes the generic path,
    for the handler's own decoder. `float_hook`: msgspec's, for the untyped values in the params, as that decoder
    has it (the same line must decode to the same values on either path)."""

    def __init__(
        self,
        types: Mapping[str, Any],
        *,
        screen: Callable[[bytes], object] | None = None,
        float_hook: Callable[[str], Any] | None = None,
    ) -> None:
        self.members: dict[type, str] = {
            msgspec.defstruct(
                f"_Typed{index}", [("params", kind), ("id", Any, UNSET)], tag_field="method", tag=method, gc=False
            ): method
            for index, (method, kind) in enumerate(types.items())
        }
        union: Any = functools.reduce(operator.or_, self.members)
        self.one: Callable[[bytes], Any] = msgspec.json.Decoder(union, float_hook=float_hook).decode
        self.many: Callable[[bytes], list[Any]] = msgspec.json.Decoder(list[union], float_hook=float_hook).decode
        self.screen = screen

    def read(self, lines: Sequence[bytes | Overflow]) -> list[Notification] | None:
        """A read whose every line is a typed notification, decoded in one call as one JSON array (a read of a
        streaming bridge mostly is); None, for the line by line path, when one line is not (or may not be)."""
        if len(lines) < 2:
            return None
        try:
            joined = b",".join(cast("list[bytes]", lines))
        except TypeError:  # an `Overflow` among them: the line path reports it
            return None
        for line in lines:  # the line path's own check (an array around them adds one level: msgspec takes it)
            if len(line) > MAX_JSON_DEPTH and too_deep(cast("bytes", line)):
                return None
        screen = self.screen
        if screen is not None and screen(joined) is not None:
            return None
        try:
            messages = self.many(b"[" + joined + b"]")
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None  # a line that is not a typed notification (no tag, another method, bad params) or not JSON
        if len(messages) != len(lines):
            return None  # a line held more than one value (`{…},{…}`): the line path refuses it
        members = self.members
        batch: list[Notification] = []
        append = batch.append
        for message in messages:
            if type(message.id) in ID_TYPES:
                return None  # a request: the line by line path serves it in order
            append(Notification(members[type(message)], None, message.params))
        return batch


# A bridge's `thread/delta` lines, each parsed once as `grammar.decode_params` would (its float hook); a line that
# may hold U+001F in a key part takes the generic path, to `grammar.decode_params`.
DELTA_LINES = TypedDecoder(
    {"thread/delta": grammar.ThreadDeltaParams}, screen=scalars.escaped_separator, float_hook=scalars.js_float
)


def decode_line(line: bytes) -> grammar.ThreadDeltaParams:
    """A `thread/delta` line's params as the daemon's bridge connection parses them (`DELTA_LINES`): the whole
    message typed in one pass; a line its screen sends on, or that fails the typed pass, through its envelope and
    `grammar.decode_params` (which raises `GrammarError`)."""
    screen = DELTA_LINES.screen
    if screen is None or screen(line) is None:
        try:
            params: grammar.ThreadDeltaParams = DELTA_LINES.one(line).params
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        else:
            return params
    params_raw = decode_envelope(line).params
    return grammar.decode_params(params_raw if params_raw else b"null")
