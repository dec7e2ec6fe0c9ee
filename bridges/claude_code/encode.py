"""Deltas on the wire, byte for byte as the reference writes them (spec §8.1, §8.2).

The grammar Structs fix every member order the reference uses but one: a presentation's `suppress`, which
the reference writes right after the icon and the Struct after `title`/`detail`. Batches are validated against
the daemon's own grammar before they are written, as the kit does, and serialized as `JSON.stringify` would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.kit import DeltaError

PRESENTATION_ORDER = ("label", "icon", "suppress", "title", "detail", "tint")


def _delta(delta: g.Delta) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(delta)
    shown = data.get("presentation")
    if isinstance(shown, dict):
        data["presentation"] = {name: shown[name] for name in PRESENTATION_ORDER if name in shown}
    return data


def delta_params(thread_id: str, deltas: Sequence[g.Delta]) -> bytes:
    """`thread/delta` params; raises `DeltaError` (before anything is written) when the grammar rejects a delta.

    Written by `js.stringify`, so raw SDK messages keep the reference's number spellings and lone surrogates.
    """
    text = js.stringify({"threadId": thread_id, "deltas": [_delta(d) for d in deltas]})
    try:
        g.convert_params(js.parse(text))  # the bytes as read back; lone surrogates are beyond msgspec's decoder
    except g.GrammarError as exc:
        raise DeltaError(f"invalid thread/delta for thread {thread_id!r}: {exc}") from None
    return text.encode()


def delta_notification(thread_id: str, deltas: Sequence[g.Delta]) -> bytes:
    """The whole `thread/delta` line (without its newline)."""
    return b'{"jsonrpc":"2.0","method":"thread/delta","params":' + delta_params(thread_id, deltas) + b"}"
