"""Replaying a recorded cell's `bridge→runtime` lane through the core.

Feeds every `thread/delta` notification (invalid ones skipped whole) to one
assembler, runs the grammar guard over the result (cleared when the runtime
lane releases a thread), and optionally stamps thread ids as the runtime would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from bbridge.core import grammar
from bbridge.core.assembler import Assembler
from bbridge.core.events import Event, stamp
from bbridge.core.guard import Guard
from bbridge.wire.lanes import BRIDGE_TO_RUNTIME, RUNTIME_TO_BRIDGE, read_cell

GOLDEN_ENTROPY = "da00000000"


class Message(msgspec.Struct, gc=False):
    """Just enough of a JSON-RPC message to route it; params stay raw until needed."""

    method: str | UnsetType = UNSET
    params: msgspec.Raw = msgspec.Raw(b"null")


class _StopParams(msgspec.Struct, gc=False):
    threadId: str | None = None
    intent: str | None = None


class _IdentityParams(msgspec.Struct, gc=False):
    threadId: str
    providerThreadId: str


_message_decoder = msgspec.json.Decoder(Message)


@dataclass
class Drop:
    index: int
    rule: str
    reason: str
    event_type: str


@dataclass
class Replay:
    events: list[Event] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> list[Event]:
        dropped = {d.index for d in self.drops}
        return [e for i, e in enumerate(self.events) if i not in dropped]


def replay_cell(
    cell: Path,
    provider_id: str,
    *,
    flush_ms: float = 0,
    clock: Literal["recorded", "fixed"] = "fixed",
    entropy_prefix: str = GOLDEN_ENTROPY,
    stamped: bool = False,
) -> Replay:
    assembler = Assembler(provider_id, entropy_prefix, progress_throttle_ms=500, text_delta_flush_ms=flush_ms)
    guard = Guard()
    result = Replay()
    provider_threads: dict[str, str] = {}
    for entry in read_cell(cell):
        try:
            message = _message_decoder.decode(entry.line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if entry.dir == RUNTIME_TO_BRIDGE:
            if message.method == "thread/stop":
                _release(guard, message.params, stamped)
            continue
        if entry.dir != BRIDGE_TO_RUNTIME:
            continue
        if message.method == "thread/identity" and stamped:
            identity = _decode_or_none(message.params, _IdentityParams)
            if identity is not None:
                provider_threads[identity.threadId] = identity.providerThreadId
            continue
        if message.method != "thread/delta":
            continue
        try:
            params = grammar.decode_params(message.params)
        except grammar.GrammarError as exc:
            result.rejected.append(str(exc))
            continue
        now = entry.ts if clock == "recorded" else 0
        for event in assembler.assemble(params.threadId, params.deltas, now):
            if stamped:
                if event["type"] == "thread/identity":
                    provider_threads[params.threadId] = event["providerThreadId"]
                stamp(event, params.threadId, provider_threads.get(params.threadId))
            violation = guard.observe(event)
            if violation is not None:
                result.drops.append(Drop(len(result.events), violation.rule, violation.reason, event["type"]))
            result.events.append(event)
    return result


def _decode_or_none(raw: msgspec.Raw, kind: type[Any]) -> Any:
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _release(guard: Guard, raw: msgspec.Raw, stamped: bool) -> None:
    stop = _decode_or_none(raw, _StopParams)
    if stop is None or stop.intent != "release":
        return
    if stamped and stop.threadId:
        guard.clear_thread(stop.threadId)
    else:
        guard.clear_thread("")
