"""`thread/delta` params on the wire: the one encoder every bridge writes its batches with.

Each batch is validated by the same decoder the daemon uses before anything is written, so an invalid delta
is a `DeltaError` in the bridge instead of a notification the daemon drops.

`encode_deltas` writes the grammar Structs as they are: their field order is the wire order, and msgspec
encodes a batch in one call (what `Bridge.emit` uses). A bridge whose reference wrote some members in
another order, or wrote its JSON as JavaScript does, holds a `DeltaEncoder` that says where: the recorded
bridge→runtime lanes are compared byte for byte (tests/test_bridge_parity.py), and the order of a delta's
members is part of the canonical JSON the parity checks compare.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import msgspec

from bbridge.core import grammar as g
from bbridge.core import js

Order = tuple[str, ...]


class DeltaError(ValueError):
    """A `thread/delta` batch the grammar rejects; raised before anything is written."""


def _invalid(thread_id: str, exc: g.GrammarError) -> DeltaError:
    return DeltaError(f"invalid thread/delta for thread {thread_id!r}: {exc}")


def encode_deltas(thread_id: str, deltas: Sequence[g.Delta]) -> bytes:
    """`thread/delta` params as JSON, in the Structs' member order, validated exactly as the daemon will decode them."""
    data = msgspec.json.encode(g.ThreadDeltaParams(thread_id, cast("list[g.AnyDelta]", list(deltas))))
    try:
        g.decode_params(data)
    except g.GrammarError as exc:
        raise _invalid(thread_id, exc) from None
    return data


def _ordered(data: dict[str, Any], order: Order) -> dict[str, Any]:
    """The members `order` names first, in its order; the rest after them, as they were."""
    return {name: data[name] for name in order if name in data} | {k: v for k, v in data.items() if k not in order}


class DeltaEncoder:
    """`thread/delta` params in a bridge's wire form: `encoder(thread_id, deltas)`, validated as `encode_deltas`.

    The tables name the members a bridge's reference wrote in another order than the Structs': `kinds`, a
    delta's own members, by its kind; `items`, the members of a delta's `item`, by the item's type;
    `presentation`, a delta's `presentation`. Each names the members that lead, in their order; the others
    follow as the Struct has them. `javascript` writes the batch as `JSON.stringify` would (`js.stringify`), so
    raw provider payloads keep the reference's number spellings and lone surrogates, and validates the bytes as
    they read back.
    """

    __slots__ = ("items", "javascript", "kinds", "presentation")

    def __init__(
        self,
        *,
        kinds: Mapping[str, Order] | None = None,
        items: Mapping[str, Order] | None = None,
        presentation: Order = (),
        javascript: bool = False,
    ) -> None:
        self.kinds = dict(kinds or {})
        self.items = dict(items or {})
        self.presentation = presentation
        self.javascript = javascript

    def __call__(self, thread_id: str, deltas: Sequence[g.Delta]) -> bytes:
        """`thread/delta` params; raises `DeltaError` (before anything is written) when the grammar rejects a delta."""
        params = {"threadId": thread_id, "deltas": [self.member_order(delta) for delta in deltas]}
        if self.javascript:
            text = js.stringify(params)
            try:
                g.convert_params(js.parse(text))  # the bytes as read back; lone surrogates are beyond msgspec's decoder
            except g.GrammarError as exc:
                raise _invalid(thread_id, exc) from None
            return text.encode()
        data = msgspec.json.encode(params)
        try:
            g.decode_params(data)
        except g.GrammarError as exc:
            raise _invalid(thread_id, exc) from None
        return data

    def member_order(self, delta: g.Delta) -> dict[str, Any]:
        """One delta as a JSON object with its members in the wire form's order."""
        data: dict[str, Any] = msgspec.to_builtins(delta)
        if (
            self.items
            and isinstance(item := data.get("item"), dict)
            and (order := self.items.get(item.get("type", ""))) is not None
        ):
            data["item"] = _ordered(item, order)
        if self.presentation and isinstance(shown := data.get("presentation"), dict):
            data["presentation"] = _ordered(shown, self.presentation)
        order = self.kinds.get(data["kind"])
        return data if order is None else _ordered(data, order)
