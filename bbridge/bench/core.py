"""Core throughput over recorded `thread/delta` lines, and the coalescing ratio (in process).

Each timed slice walks every cell with a fresh assembler (coalescing off, as the
golden replays), repeating the corpus enough times to last milliseconds; the
yardstick and the measured workloads alternate slice by slice, and each figure
is its deltas over its summed time (so their ratios are ratios of sums).

The yardstick every ratio divides by, `decode_only_per_s`, is a fixed workload:
msgspec decoding each line's envelope, then its params into the grammar with
every rule a msgspec constraint (`DECLARED_PARAMS`), as the grammar was written
when the targets were set. bbridge itself now checks the key-part rule outside
msgspec (`grammar.ESCAPED_SEPARATOR`); the yardstick does not follow it, or each
speed-up of our own validation would move the ruler instead of the figures.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgspec

from bbridge.core import grammar
from bbridge.core.assembler import Assembler
from bbridge.replay.cells import GOLDEN_ENTROPY, Message
from bbridge.wire.delta_decoder import decode_line
from bbridge.wire.lanes import bridge_lane, find_cells

MIN_DELTAS_PER_RUN = 20_000
_message = msgspec.json.Decoder(Message)
_STRICT_KEY_PART = Annotated[str, msgspec.Meta(pattern=grammar.KEY_PART_PATTERN)]


def _declared(annotation: Any, made: dict[type, type]) -> Any:
    """`annotation` with every `KeyPart` a msgspec pattern again (Structs holding one become subclasses)."""
    if typing.get_origin(annotation) is Annotated:
        return _STRICT_KEY_PART if annotation == grammar.KeyPart else annotation
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return _declared_struct(annotation, made)
    args = typing.get_args(annotation)
    changed = tuple(_declared(arg, made) for arg in args)
    if changed == args:
        return annotation
    if typing.get_origin(annotation) is list:
        return list[changed[0]]  # type: ignore[valid-type]
    return functools.reduce(operator.or_, changed)  # a union: the grammar's only other generic


def _declared_struct(kind: type, made: dict[type, type]) -> type:
    if kind not in made:
        fields = []
        for field in msgspec.structs.fields(kind):
            declared = _declared(field.type, made)
            if declared is not field.type:
                fields.append((field.name, declared, field.default))
        # a subclass keeps the tag, the field order and `__post_init__`; only the redefined fields change
        made[kind] = msgspec.defstruct(kind.__name__, fields, bases=(kind,), kw_only=True) if fields else kind
    return made[kind]


DECLARED_PARAMS = _declared_struct(grammar.ThreadDeltaParams, {})
decode_declared: Callable[[bytes], Any] = msgspec.json.Decoder(DECLARED_PARAMS, float_hook=grammar.js_float).decode


@dataclass
class Cell:
    provider_id: str
    lines: list[bytes]  # the cell's `thread/delta` JSON-RPC lines, in wire order
    params: list[grammar.ThreadDeltaParams]  # the valid ones, decoded


def load_corpus(root: Path) -> list[Cell]:
    cells = []
    for path in find_cells(root):
        lines, params = [], []
        for entry in bridge_lane(path):
            line = entry.line.encode()
            try:
                note = _message.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if note.method != "thread/delta":
                continue
            lines.append(line)
            with contextlib.suppress(grammar.GrammarError):
                params.append(grammar.decode_params(note.params))
        cells.append(Cell(path.parent.name, lines, params))
    return cells


def _parse_validate_assemble(cells: list[Cell]) -> None:
    for cell in cells:
        assembler = Assembler(cell.provider_id, GOLDEN_ENTROPY, 500, 0)
        for line in cell.lines:
            try:
                params = decode_line(line)  # as the daemon's bridge connection parses it
            except grammar.GrammarError:
                continue
            assembler.assemble(params.threadId, params.deltas, 0)


def _decode_only(cells: list[Cell]) -> None:
    for cell in cells:
        for line in cell.lines:
            try:
                decode_declared(_message.decode(line).params)
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue


def _assemble_only(cells: list[Cell]) -> None:
    for cell in cells:
        assembler = Assembler(cell.provider_id, GOLDEN_ENTROPY, 500, 0)
        for params in cell.params:
            assembler.assemble(params.threadId, params.deltas, 0)


def _sliced_rates(
    workloads: dict[str, Callable[[list[Cell]], None]], cells: list[Cell], deltas: int, runs: int
) -> dict[str, float]:
    """Each workload's deltas per second, the workloads alternating in short slices (one repeat of the corpus
    lasting milliseconds each, `runs` rounds): a slow stretch of the machine hits every workload alike, so the
    ratio of two of them (the ratio of their sums) holds still from one run to the next."""
    repeat = max(1, math.ceil(MIN_DELTAS_PER_RUN / max(deltas, 1)))
    for work in workloads.values():
        work(cells)  # warm-up
    spent = dict.fromkeys(workloads, 0.0)
    for _ in range(runs):
        for name, work in workloads.items():
            started = time.perf_counter()
            for _ in range(repeat):
                work(cells)
            spent[name] += time.perf_counter() - started
    return {name: deltas * repeat * runs / seconds for name, seconds in spent.items()}


def decode_only_rate(cells: list[Cell], deltas: int) -> float:
    """One yardstick slice (for phases measured elsewhere to alternate with)."""
    return _sliced_rates({"decode_only": _decode_only}, cells, deltas, 1)["decode_only"]


def bench_core(root: Path, runs: int) -> dict[str, Any]:
    cells = load_corpus(root)
    deltas = sum(len(p.deltas) for cell in cells for p in cell.params)
    if not deltas:
        raise ValueError(f"no valid thread/delta notifications under {root}")
    rates = _sliced_rates(
        {"decode_only": _decode_only, "deltas": _parse_validate_assemble, "assemble_only": _assemble_only},
        cells,
        deltas,
        runs,
    )
    return {
        "corpus": str(root),
        "cells": len(cells),
        "notifications": sum(len(cell.lines) for cell in cells),
        "deltas": deltas,
        "runs": runs,
        "deltas_per_s": round(rates["deltas"]),
        "decode_only_per_s": round(rates["decode_only"]),
        "assemble_only_per_s": round(rates["assemble_only"]),
    }


def events_per_1000_tokens(flush_ms: float) -> int:
    """Text events for 1,000 one-token deltas arriving 1 ms apart (simulated clock), the tail flush included."""
    assembler = Assembler("bench", GOLDEN_ENTROPY, 500, flush_ms)
    key = grammar.ItemKey(providerItemId="m")
    events = assembler.assemble("t", [grammar.TurnOpen()], 0)
    for tick in range(1, 1001):
        events += assembler.assemble("t", [grammar.ItemTextDelta(key=key, channel="agentMessage", text=" x")], tick)
    events += assembler.assemble("t", [grammar.ItemTextClose(key=key, channel="agentMessage")], 1001)
    return sum(1 for event in events if event["type"] == "item/agentMessage/delta")
