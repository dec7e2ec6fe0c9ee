"""Decoding a `thread/delta` line: the one place that says how, and why each fast path exists.

The rules are the grammar's (`core/grammar.py`): decoding into its Structs *is* validation, and
`grammar.decode_params` is the reference every path here must agree with (`tests/test_bench.py` checks each
bench line, an integral float and a U+001F key part, and `tests/test_rpc_reads.py` the framing passes). The daemon
reads a bridge's lines through `DELTA_LINES`, a `TypedDecoder`:

* **A whole read in one call** (`TypedDecoder.read_whole`, which `rpc.Connection` tries first for each read
  that is whole lines by itself, `framing.LineReader.whole`; `read` for a read's lines otherwise): when every
  line of a read is a typed notification, the lines become one JSON array (their newlines replaced: no split
  and join) and are decoded by one msgspec call (`many`) straight into the read's `Notification`s, params typed
  (not a Python loop making them from tagged messages and checking each one's id, which cost more per delta).
  A streaming bridge's read mostly is such a read, so the read costs one call, not one per line. Each line's
  depth is checked as the line path does (measuring the joined array's depth costs far more). A read of one
  line goes the line path: looking for its method's tag first cost more than that path's classification.
* **A line in one pass** (`TypedDecoder.one`, tried by `peer.Inbound.receive` for each line of any other
  read, inline in its loop: a call per line more would cost what the pass saves): the whole message, `method`
  a literal, decoded once into the grammar's types instead of an envelope and then its params. What does not
  decode so, another message, a request or invalid params, takes the envelope path unchanged, and the params
  reach `grammar.decode_params` in the daemon's delivery.
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

from collections.abc import Callable, Sequence
from io import BytesIO
from typing import Any, Literal, cast

import msgspec
from msgspec import UNSET

from bbridge.core import grammar, scalars
from bbridge.core.nesting import MAX_JSON_DEPTH, too_deep
from bbridge.wire.framing import Overflow
from bbridge.wire.jsonrpc import Notification, decode_envelope

# The ids a notification may carry (`jsonrpc.ID_TYPES` are a request's): any JSON value but a string or a number.
_NO_ID = None | bool | list[Any] | dict[str, Any]


class TypedDecoder:
    """Decoders for whole messages of one notification method, params typed: `one` for a line, `many` for a read's
    lines joined as one JSON array. Each decodes straight into `Notification`s (a subclass whose `decoded` holds
    the params and `params` is None): no second object a line, and no Python loop over a read's messages.

    A message with an id that makes it a request (a string or a number, `ID_TYPES`) does not decode here (its
    `id` admits only the other JSON values), nor does another method (`method` is a literal): either takes the
    generic path, as invalid params do. `screen`: a line (or read) for which it returns anything but None is not
    decoded here; it takes the generic path, for the handler's own decoder. `float_hook`: msgspec's, for the
    untyped values in the params, as that decoder has it (the same line must decode to the same values on either
    path)."""

    def __init__(
        self,
        method: str,
        kind: Any,
        *,
        screen: Callable[[bytes], object] | None = None,
        float_hook: Callable[[str], Any] | None = None,
    ) -> None:
        message: Any = msgspec.defstruct(
            "_Typed",
            [
                ("method", Literal[method]),
                ("params", None, None),  # None: its key renamed to one no bridge writes (non-null there: not typed)
                ("decoded", kind),
                ("id", _NO_ID, UNSET),
            ],
            bases=(Notification,),
            rename={"params": "(params)", "decoded": "params"},
            kw_only=True,
            gc=False,
        )
        self.one: Callable[[bytes], Notification] = msgspec.json.Decoder(message, float_hook=float_hook).decode
        self.many: Callable[[bytes], list[Notification]] = msgspec.json.Decoder(
            list[message], float_hook=float_hook
        ).decode
        self.screen = screen

    def read(self, lines: Sequence[bytes | Overflow]) -> list[Notification] | None:
        """`read_whole` for a read's lines as `framing.LineReader.feed` split them (a read that was not whole lines
        by itself): None for a read of fewer than two, or with an `Overflow` (the line path reports it)."""
        if len(lines) < 2:
            return None
        try:
            data = b"\n".join([*cast("list[bytes]", lines), b""])
        except TypeError:
            return None
        return self.read_whole(data)

    def read_whole(self, data: bytes | bytearray) -> list[Notification] | None:
        """A read of whole lines (each ending in a newline, none holding a CR: `framing.LineReader.whole`) whose
        every line is a typed notification, decoded in one call as one JSON array (a read of a streaming bridge
        mostly is); None, for the line by line path, when one line is not (or may not be), or for a single line.

        The lines are found with `BytesIO.readlines` (a `memchr` each) and joined by replacing their newlines:
        `bytes.split` steps through a read byte by byte, and a split and join cost about twice as much."""
        lines = BytesIO(data).readlines()
        if len(lines) < 2:
            return None
        for line in lines:  # the line path's own check (an array around them adds one level: msgspec takes it)
            if len(line) > MAX_JSON_DEPTH and too_deep(line):
                return None
        array = b"[" + data[:-1].replace(b"\n", b",") + b"]"
        screen = self.screen
        if screen is not None and screen(array) is not None:
            return None
        try:
            messages = self.many(array)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None  # a line that is not a typed notification (another method, a request, bad params) or not JSON
        if len(messages) != len(lines):
            return None  # a line held more than one value (`{…},{…}`): the line path refuses it
        return messages


# A bridge's `thread/delta` lines, each parsed once as `grammar.decode_params` would (its float hook); a line that
# may hold U+001F in a key part takes the generic path, to `grammar.decode_params`.
DELTA_LINES = TypedDecoder(
    "thread/delta", grammar.ThreadDeltaParams, screen=scalars.escaped_separator, float_hook=scalars.js_float
)


def decode_line(line: bytes) -> grammar.ThreadDeltaParams:
    """A `thread/delta` line's params as the daemon's bridge connection parses them (`DELTA_LINES`): the whole
    message typed in one pass; a line its screen sends on, or that fails the typed pass, through its envelope and
    `grammar.decode_params` (which raises `GrammarError`)."""
    screen = DELTA_LINES.screen
    if screen is None or screen(line) is None:
        try:
            params: grammar.ThreadDeltaParams = DELTA_LINES.one(line).decoded
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        else:
            return params
    params_raw = decode_envelope(line).params
    return grammar.decode_params(params_raw if params_raw else b"null")
